"""The tool calls of one answer: what the model called, on which server, with what, and what came back.

An answer that calls tools is still one assistant message: its text is everything the model said, and
each ToolUse records where in that text the call came (`at`, in characters) and which pass of the model
made it (`step`). That is enough to show the calls in place, to store and export them, and to send the
turn to the model again as it happened (assistant text with its calls, then each call's result). No Qt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from engine import ChatMessage, ToolCall


class ToolStatus(str, Enum):
    """Where a call stands. Only DONE and FAILED_TOOL gave the model a result it asked for."""

    PENDING = "pending"  # waiting for the user's approval, or running
    DONE = "done"
    FAILED_TOOL = "tool_error"  # the tool ran and reported an error: its text went back to the model
    DENIED = "denied"
    TIMED_OUT = "timed_out"
    FAILED = "failed"  # the server would not start, crashed, or is not running
    CANCELLED = "cancelled"  # stopped from the window


@dataclass
class ToolUse:
    id: str  # the call's id, as the model's chat format expects it in the result
    name: str
    arguments: dict[str, Any]
    server: str = ""
    step: int = 0  # which pass of the model made it (0: the first)
    at: int = 0  # characters of the answer's text said before the call
    status: ToolStatus = ToolStatus.PENDING
    result: str = ""  # what the tool answered (or, for FAILED_TOOL, what it said went wrong)
    error: str = ""  # why there is no result (denied, timed out, a server that failed)
    elapsed_s: float = 0.0

    def __post_init__(self) -> None:
        self.status = ToolStatus(self.status)

    @property
    def call(self) -> ToolCall:
        return ToolCall(self.id, self.name, dict(self.arguments))

    def result_for_model(self) -> str:
        """What the model reads as this call's result (a call that never ran says why)."""
        if self.status in (ToolStatus.DONE, ToolStatus.FAILED_TOOL):
            return self.result
        return f"(not run: {self.error or self.status.value})"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data) -> ToolUse | None:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        try:
            use = cls(**{"id": "", "arguments": {}, **known})
        except (TypeError, ValueError):
            return None
        if not isinstance(use.arguments, dict):
            use.arguments = {}
        return use


def load_tool_uses(data) -> list[ToolUse]:
    """Stored tool uses; what cannot be read is left out."""
    return [use for item in data or [] if (use := ToolUse.from_dict(item)) is not None]


def replay(content: str, uses: Sequence[ToolUse], reasoning: str = "") -> list[ChatMessage]:
    """An answer that called tools as the model saw it: per pass, its text with its calls and then the
    results, and finally what it said after the last one. Without tool uses: the answer alone."""
    if not uses:
        return [ChatMessage("assistant", content, reasoning)]
    out: list[ChatMessage] = []
    groups = passes(uses)
    texts = cut_text(content, groups)
    for text, group in zip(texts, groups, strict=False):
        out.append(ChatMessage("assistant", text, tool_calls=tuple(u.call for u in group)))
        out += [ChatMessage("tool", u.result_for_model(), tool_call_id=u.id, name=u.name) for u in group]
    if rest := texts[-1]:
        out.append(ChatMessage("assistant", rest))
    return out


def passes(uses: Iterable[ToolUse]) -> list[list[ToolUse]]:
    """The calls grouped by the pass of the model that made them, in order."""
    groups: dict[int, list[ToolUse]] = {}
    for use in uses:
        groups.setdefault(use.step, []).append(use)
    return [group for _step, group in sorted(groups.items())]


def cut_text(content: str, groups: Sequence[Sequence[ToolUse]]) -> list[str]:
    """The answer's text in the stretches between its passes' calls (len(groups) + 1 of them, trimmed:
    the joins between passes are paragraph breaks): before the first pass's calls, ..., after the last."""
    pieces, start = [], 0
    for group in groups:
        at = max(start, min(group[0].at, len(content)))
        pieces.append(content[start:at].strip())
        start = at
    pieces.append(content[start:].strip())
    return pieces


def tool_key(server: str, tool: str) -> str:
    """How a chat remembers a tool it may call without asking (ChatSettings.allowed_tools)."""
    return f"{server}/{tool}"
