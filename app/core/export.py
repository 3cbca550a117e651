"""A conversation as Markdown (to read and share) or JSON (everything, including statistics)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from itertools import zip_longest
from pathlib import Path

from app.core.figures import figures
from app.core.store import Conversation, Message, Role, Store
from app.core.tool_steps import ToolStatus, ToolUse, cut_text, passes

FORMAT_VERSION = 1


def to_markdown(conversation: Conversation, messages: Sequence[Message]) -> str:
    out = [f"# {conversation.title}", "", f"*Exported from Specula on {time.strftime('%Y-%m-%d %H:%M')}*", ""]
    for m in messages:
        if m.role == Role.USER:
            out += ["## You", ""]
            for a in m.attachments:  # folded, like thinking: the files can be long
                out += [f"<details><summary>Attached: {a.name}</summary>", "", a.quoted(), "", "</details>", ""]
            out += [m.content, ""]
            continue
        name = m.params.get("target") or "Assistant"
        draft = m.params.get("draft")
        out += [f"## {name}" + (f" (draft: {draft})" if draft else ""), ""]
        if m.reasoning:  # folded, as in the app (GitHub and most Markdown viewers honour <details>)
            out += ["<details><summary>Thinking</summary>", "", m.reasoning, "", "</details>", ""]
        out += answer_markdown(m.content, m.tool_uses)
        if m.sources:  # the passages of the user's documents it was given, [n] as it cites them
            out += ["<details><summary>Sources</summary>", ""]
            for src in m.sources:
                heading = f" · {src.heading}" if src.heading else ""
                out += [f"**[{src.n}]** {src.path} — {src.where().split(', ', 1)[-1]}{heading}"
                        + (" *(cited)*" if src.cited else ""), "", *("> " + line for line in src.text.splitlines()), ""]  # fmt: skip
            out += ["</details>", ""]
        if m.error:
            out += [f"> **Error:** {m.error.splitlines()[0]}", ""]
        if not m.complete:
            out += ["> *Incomplete: the app stopped before this answer finished.*", ""]
        if m.stats and m.stats.n_tokens:
            out += ["*" + " · ".join(text for text, _tip in figures(m.stats, m.params)) + "*", ""]
        if m.comparison:
            c = m.comparison
            same = "identical" if c.get("identical") else "different"
            out += [
                f"*Measured against plain decoding: {c.get('measured_speedup', 0):.2f}× "
                f"({c.get('spec_tps', 0):.1f} vs {c.get('plain_tps', 0):.1f} tok/s), texts {same}*",
                "",
            ]
    return "\n".join(out).rstrip() + "\n"


def answer_markdown(content: str, uses: Sequence[ToolUse]) -> list[str]:
    """The answer's text with each pass's tool calls where the model made them, as the app shows it."""
    if not uses:
        return [content, ""]
    groups = passes(uses)
    out: list[str] = []
    for text, group in zip_longest(cut_text(content, groups), groups):
        out += [text, ""] if text else []
        out += tool_uses_markdown(group) if group else []
    return out


def tool_uses_markdown(uses: Sequence[ToolUse]) -> list[str]:
    """Each tool call folded, as in the app: its name and server, then the full arguments and its result."""
    out: list[str] = []
    for u in uses:
        where = f" on {u.server}" if u.server else ""
        status = "" if u.status == ToolStatus.DONE else f" ({u.error or u.status.value})"
        out += [f"<details><summary>Tool call: {u.name}{where}{status}</summary>", ""]
        out += ["Arguments:", "", "```json", json.dumps(u.arguments, indent=2, ensure_ascii=False), "```", ""]
        if u.status in (ToolStatus.DONE, ToolStatus.FAILED_TOOL):
            out += [f"Result ({u.elapsed_s:.1f} s):", "", "```", u.result, "```", ""]
        out += ["</details>", ""]
    return out


def to_json(conversation: Conversation, messages: Sequence[Message]) -> str:
    data = {
        "format": "specula-conversation",
        "version": FORMAT_VERSION,
        "title": conversation.title,
        "created": conversation.created,
        "updated": conversation.updated,
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "reasoning": m.reasoning,
                "attachments": [a.to_dict() for a in m.attachments],
                "created": m.created,
                "complete": m.complete,
                "finish_reason": m.finish_reason,
                "error": m.error,
                "params": m.params,
                "stats": m.stats.to_dict() if m.stats else None,
                "comparison": m.comparison,
                "sources": [src.to_dict() for src in m.sources],
                "tool_uses": [u.to_dict() for u in m.tool_uses],
                # Token sources as [text, source, round] triples.
                "tokens": [[t.text, t.source, t.round] for t in m.tokens],
            }
            for m in messages
        ],
    }
    return json.dumps(data, indent=1, ensure_ascii=False)


EXPORT_KINDS = {"markdown": (".md", "Markdown (*.md)"), "json": (".json", "JSON (*.json)")}


def export_file_name(conversation: Conversation, fmt: str) -> tuple[str, str]:
    """(A file name made of the title, the file dialog's filter) for an export in fmt ("markdown" or "json")."""
    suffix, kind = EXPORT_KINDS[fmt]
    safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in conversation.title).strip() or "conversation"
    return safe + suffix, kind


def write_export(store: Store, conversation: Conversation, fmt: str, path: Path) -> None:
    """Write the conversation as stored, in fmt, to path. Raises OSError."""
    messages = store.messages(conversation.id)
    text = to_markdown(conversation, messages) if fmt == "markdown" else to_json(conversation, messages)
    path.write_text(text, encoding="utf-8")
