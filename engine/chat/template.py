"""Turn a conversation into the prompt the model was trained on, as template text and content.

The format, first that works: the user's override for this file (a llama.cpp preset name or a
Jinja text), the GGUF's own Jinja template (llama-cpp-python's sandboxed formatter), the built-in
format llama.cpp has for the model's family (engine/chat/formats.py), and ChatML only as the
last resort. Each message's content is rendered as a placeholder and put back afterwards, so the
result says which text the template wrote (its markers become control tokens) and which text is
the users' (plain text, engine/chat/prompt_tokens.py). The same placeholders reveal, once per format,
what the template does with a system prompt, with surrounding whitespace and with reasoning.

Tools (engine/tools) go to a Jinja template that renders them (its text names `tools`) as the
`tools` variable, with assistants' `tool_calls` and `tool` messages, as Hugging Face's templates
take them; any other format gets the conversation rewritten in Hermes's style (engine/tools/fallback.py)
and tools_native says so. A tool's result is message content: plain text, like a user's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from engine.chat import formats as chat_formats
from engine.chat.harmony import is_harmony
from engine.chat.prompt_tokens import Segment
from engine.config import ChatMessage
from engine.gguf.header import GGUFInfo
from engine.tools import HERMES, ToolChoice, ToolSpec, fallback, supports_tools
from engine.tools import detect as detect_tool_syntax

log = logging.getLogger(__name__)

# Reasoning markers, the usual one first; a model's own pair is the one its vocabulary or template has.
REASONING_MARKERS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"), ("◁think▷", "◁/think▷"))

_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")  # private-use characters: never in a template

Render = Callable[..., str]  # render(messages, tools=None): messages and tools as template dicts


def _slot(i: int) -> str:
    return f"\ue000{i}\ue001"


def _render_chatml(messages: list[dict], tools: list[dict] | None = None) -> str:
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


@dataclass(frozen=True)
class Format:
    """One way of rendering, and where it came from."""

    source: str  # "override", "file", "family", "chatml"
    name: str  # a preset name, "jinja" or "chatml"
    render: Render
    template: str = ""  # the Jinja text, for a Jinja format

    @property
    def description(self) -> str:
        if self.source == "file":
            return "the file's own chat template"
        if self.source == "override":
            return "your template" if self.name == "jinja" else f"{chat_formats.label(self.name)} (your choice)"
        if self.source == "family":
            return f"{chat_formats.label(self.name)} (llama.cpp's format for this model's family)"
        return "ChatML (no chat format is known for this model)"


@dataclass(frozen=True)
class ChatFormatInfo:
    """What a front end tells the user about the format in use."""

    description: str  # "Gemma (llama.cpp's format for this model's family)"
    source: str  # "override", "file", "family", "chatml"
    base_model: bool  # the file has no chat template of its own
    reasoning_markers: tuple[str, str]
    # Tools go through the model's own template (trained for them) rather than Hermes-style text in
    # the system prompt (engine/tools/fallback.py), which small models follow less reliably.
    tools_native: bool = False


class ChatFormatter:
    def __init__(self, info: GGUFInfo, override: str | None = None, controls: Iterable[str] = ()):
        """controls: the vocabulary's control-token texts (PromptTokenizer.controls). Tools and calls are
        rendered by the template as its own text, whose control strings become control tokens: a tool's
        description or a call's arguments holding `<|im_end|>` would end a turn and start a forged one
        (an MCP server's descriptions are not the user's). Their control strings are kept as text."""
        names = sorted((c for c in controls if c), key=len, reverse=True)
        self._controls = re.compile("|".join(map(re.escape, names))) if names else None
        tokens = info.tokens
        bos, eos = info.get("tokenizer.ggml.bos_token_id"), info.get("tokenizer.ggml.eos_token_id")
        self.bos_text = tokens[bos] if bos is not None and 0 <= bos < len(tokens) else ""
        self.eos_text = tokens[eos] if eos is not None and 0 <= eos < len(tokens) else ""
        self.family = chat_formats.detect_family(info)
        self.file_has_template = bool(info.chat_template)
        candidates = []
        if override:
            candidates.append(self._candidate("override", override))
        if info.chat_template:
            candidates.append(self._candidate("file", info.chat_template))
        if self.family:
            candidates.append(Format("family", self.family, _builtin(self.family)))
        candidates.append(Format("chatml", "chatml", _render_chatml))
        self._formats = [f for f in candidates if f is not None and _renders(f, info.name)]
        self.format_used = self._formats[0]
        # ChatML on a vocabulary without its tokens: its end marker arrives as text, so stop on the text.
        self.stop_strings = (
            ("<|im_end|>", "<|im_start|>") if self.format_used.source == "chatml" and "<|im_end|>" not in tokens else ()
        )
        template_text = info.chat_template or ""
        vocab = set(tokens)
        self.reasoning_markers = next(
            (pair for pair in REASONING_MARKERS if pair[0] in vocab or pair[0] in template_text), REASONING_MARKERS[0]
        )
        self._learn(self.format_used)
        # Tools: rendered by the template itself when it knows them, else described the Hermes way.
        self.tools_native = (
            self.format_used.name == "jinja"
            and supports_tools(self.format_used.template)
            and _renders_tools(self.format_used)
        )
        self.tool_syntax = (
            detect_tool_syntax(self.format_used.template, vocab, self.family) if self.tools_native else HERMES
        )
        # gpt-oss answers in channels (engine/chat/harmony.py) rather than with <think> markers, and its
        # template drops earlier turns' analysis: handed <think> markers, it would keep them as the answer's text.
        self.harmony = is_harmony(self.family, self.format_used.template)
        self.keeps_reasoning = self.keeps_reasoning and not self.harmony

    def _candidate(self, source: str, template: str) -> Format | None:
        if template in chat_formats.builtin_names():
            return Format(source, template, _builtin(template))
        try:
            jinja = Jinja2ChatFormatter(template, eos_token=self.eos_text, bos_token=self.bos_text)
        except Exception as e:  # a template that does not even compile
            log.warning("a chat template (%s) does not compile (%s); not used", source, e)
            return None
        return Format(
            source, "jinja", lambda messages, tools=None: jinja(messages=messages, tools=tools).prompt, template
        )

    def _learn(self, fmt: Format) -> None:
        """Ask the format, with placeholders, what it does with system prompts, whitespace and reasoning."""
        render = fmt.render
        try:
            out = render([{"role": "system", "content": _slot(0)}, {"role": "user", "content": _slot(1)}])
            self.system_role = _slot(0) in out
        except Exception:
            self.system_role = False  # "System role not supported": fold it into the first user turn
        try:
            self.trims = f" {_slot(0)} " not in render([{"role": "user", "content": f" {_slot(0)} "}])
        except Exception:
            self.trims = False
        opening, closing = self.reasoning_markers
        try:
            out = render(
                [
                    {"role": "user", "content": _slot(0)},
                    {"role": "assistant", "content": f"{opening}\n{_slot(1)}\n{closing}\n\n{_slot(2)}"},
                    {"role": "user", "content": _slot(3)},
                ]
            )
            self.keeps_reasoning = _slot(1) in out
        except Exception:
            self.keeps_reasoning = False
        try:
            tail = render([{"role": "user", "content": _slot(0)}]).rsplit(_slot(0), 1)[-1]
            self.opens_reasoning = tail.rstrip().endswith(opening)  # the prompt itself opens the thinking
        except Exception:
            self.opens_reasoning = False

    @property
    def is_base_model(self) -> bool:
        """The file has no chat format of its own: a base (pretrained) model, or one packaged without it."""
        return not self.file_has_template

    @property
    def description(self) -> str:
        return self.format_used.description

    @property
    def summary(self) -> ChatFormatInfo:
        return ChatFormatInfo(
            self.description, self.format_used.source, self.is_base_model, self.reasoning_markers, self.tools_native
        )

    def segments(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (), tool_choice: ToolChoice | None = None
    ) -> list[Segment]:
        """The prompt as template text and content, ending where the assistant's answer begins.

        tools: the functions the model may call; tool_choice: whether it must (said in the system
        prompt). Messages may hold assistants' tool_calls and `tool` results with or without tools.
        No messages, no prompt: the context meter counts a new chat so, and templates that read
        messages[0] (Qwen's, for its default system prompt) would fail on it."""
        if not messages:
            return []
        contents, rendered = [], []
        for m in self._prepared(messages):
            content = m.content.strip() if self.trims else m.content
            if m.role == "assistant" and m.reasoning and self.keeps_reasoning:
                opening, closing = self.reasoning_markers
                slots = f"{opening}\n{_slot(len(contents))}\n{closing}\n\n{_slot(len(contents) + 1)}"
                contents += [m.reasoning.strip(), content]
            elif m.tool_calls and not content:
                slots = ""  # templates write a newline before content that is there
            else:
                slots = _slot(len(contents))
                contents.append(content)
            message = {"role": m.role, "content": slots}
            if m.tool_calls:  # only when present: templates test `'tool_calls' in message`
                message["tool_calls"] = [self._as_text(call.for_template(), contents) for call in m.tool_calls]
            if m.role == "tool":
                message |= {"tool_call_id": m.tool_call_id, "name": m.name}
            rendered.append(message)
        tool_dicts = [self._as_text(t.as_openai(), contents) for t in tools]
        if tool_dicts or any(m.tool_calls or m.role == "tool" for m in messages):
            choice = fallback.choice_prompt(tool_choice) if tool_choice is not None and tool_dicts else ""
            rendered = fallback.with_system_text(rendered, choice, self.system_role)
            if self.tools_native:
                try:
                    return _split(self.format_used.render(rendered, tools=tool_dicts or None), contents)
                except Exception as e:  # e.g. Llama 3's "only supports single tool-calls at once"
                    log.warning("the chat template cannot render these tool calls (%s); described instead", e)
            rendered = fallback.rewrite(rendered, tool_dicts, self.system_role)
        for fmt in self._formats:
            try:
                text = fmt.render(rendered)
                break
            except Exception as e:  # templates raise on roles they do not know, etc.
                log.warning("chat format %s failed (%s); trying the next", fmt.description, e)
        else:
            text = _render_chatml(rendered)
        return _split(text, contents)

    def _as_text(self, value, contents: list[str]):
        """value (a tool or a call, as the template takes it) with each control string in its strings
        moved to a content slot: the template writes it where it belongs, and it is tokenized as text."""
        if self._controls is None:
            return value
        if isinstance(value, str):

            def slot(m: re.Match) -> str:
                contents.append(m.group())
                return _slot(len(contents) - 1)

            return self._controls.sub(slot, value)
        if isinstance(value, dict):
            return {self._as_text(k, contents): self._as_text(v, contents) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._as_text(v, contents) for v in value]
        return value

    def format(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (), tool_choice: ToolChoice | None = None
    ) -> str:
        return "".join(s.text for s in self.segments(messages, tools, tool_choice))

    def _prepared(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The messages as this format can take them: a system prompt folded into the first user turn
        when the format has no system role (the way Gemma's own template does it)."""
        messages = list(messages)
        if self.system_role or not messages or messages[0].role != "system":
            return messages
        system, rest = messages[0], messages[1:]
        if rest and rest[0].role == "user":
            return [ChatMessage("user", f"{system.content}\n\n{rest[0].content}"), *rest[1:]]
        return [ChatMessage("user", system.content), *rest]


def _split(text: str, contents: list[str]) -> list[Segment]:
    segments, pos = [], 0
    for m in _PLACEHOLDER.finditer(text):
        segments.append(Segment(text[pos : m.start()], template=True))
        segments.append(Segment(contents[int(m.group(1))], template=False))
        pos = m.end()
    segments.append(Segment(text[pos:], template=True))
    return [s for s in segments if s.text]


def _builtin(name: str) -> Render:
    return lambda messages, tools=None: chat_formats.apply_builtin(name, [(m["role"], m["content"]) for m in messages])


_PROBE_TOOL = ToolSpec("specula_probe_tool", "Probe.", {"type": "object", "properties": {}}).as_openai()


def _renders_tools(fmt: Format) -> bool:
    """The template writes the tools it is given into the prompt. Some name `tools` and take them from
    elsewhere (Phi-4-mini's reads a system message's own `tools` key): given ours, they drop them."""
    user = {"role": "user", "content": "Hi"}
    for messages in ([user], [{"role": "system", "content": "Be brief."}, user]):
        try:
            if _PROBE_TOOL["function"]["name"] in fmt.render(messages, tools=[_PROBE_TOOL]):
                return True
        except Exception:  # a template may want a system message, or raise on one
            continue
    return False


def _renders(fmt: Format, model_name: str) -> bool:
    """A format that cannot render a one-line conversation is no format (a broken file template)."""
    try:
        return _slot(0) in fmt.render([{"role": "user", "content": _slot(0)}])
    except Exception as e:
        log.warning("chat format %s of %s does not render (%s); not used", fmt.description, model_name, e)
        return False
