"""How each model family writes a tool call, and whether its chat template offers tools at all.

Eight syntaxes cover the families the engine knows that were trained for tools:

- hermes: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per call
  (Qwen 2.5/3, Hermes 2/3, and the fallback rendering of engine/tools/fallback.py); also the same
  object in a ```json fence, or bare as the whole answer, which Qwen2.5-Coder 1.5B and 0.5B write
  instead (llama.cpp's Hermes parser takes both too), when it names a tool offered;
- llama3: a JSON object `{"name": ..., "parameters": {...}}` as the whole answer, or after
  `<|python_tag|>` (Llama 3.1-3.3);
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or the newer
  `[TOOL_CALLS]name[ARGS]{...}` (Mistral v3 and later: Nemo, Small 3.x, Devstral);
- granite: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]` (Granite 3.x; Granite 4 writes Hermes's);
- deepseek: `<｜tool▁calls▁begin｜>` around calls of their own markers (engine/tools/deepseek_calls.py);
- command-r: `<|START_ACTION|>[{"tool_name": ..., "parameters": {...}}, ...]<|END_ACTION|>` (Command R7B);
- harmony: `to=functions.name <|constrain|>json<|message|>{...}`, the part of a gpt-oss message to a
  tool that engine/chat/harmony.py passes on (the rest of its header is not the answer's text);
- qwen-xml: `<tool_call>\n<function=name>\n<parameter=key>\nvalue\n</parameter>\n</function>\n</tool_call>`
  (Qwen3-Coder, Qwen3.5: engine/tools/xml_calls.py reads the body).

The syntax is read from the template's text and the vocabulary's tokens, which name their markers.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from engine.tools.deepseek_calls import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP

_MENTIONS_TOOLS = re.compile(r"\btools\b")


@dataclass(frozen=True)
class ToolSyntax:
    name: str
    opening: str  # the marker that starts a call (a control token in some vocabularies)
    closing: str = ""  # the marker that ends one; "" when the JSON value's own end does
    bare_json: bool = False  # a JSON call object at the very start of the answer is a call too
    args_marker: str = ""  # between a call's name and its arguments, in the name-first form
    short_ids: bool = False  # call ids of 9 letters and digits (Mistral's templates check them)
    # A call object in a ```json code fence, or bare at the answer's start, is a call too when it names
    # a tool offered (else it is text: JSON the user asked for).
    lenient: bool = False
    xml: bool = False  # the body is <function=…> with <parameter=…> blocks, not JSON
    deepseek: bool = False  # the body is DeepSeek's calls, each between markers of their own
    inner: tuple[str, ...] = ()  # markers inside a call's body

    @property
    def markers(self) -> tuple[str, ...]:
        """Marker texts the parser must see even where the vocabulary makes them silent control tokens."""
        return tuple(m for m in (self.opening, self.closing, self.args_marker, *self.inner) if m)


HERMES = ToolSyntax("hermes", "<tool_call>", "</tool_call>", bare_json=True, lenient=True)
LLAMA3 = ToolSyntax("llama3", "<|python_tag|>", bare_json=True)
MISTRAL = ToolSyntax("mistral", "[TOOL_CALLS]", args_marker="[ARGS]", short_ids=True)
QWEN_XML = ToolSyntax("qwen-xml", "<tool_call>", "</tool_call>", xml=True)
HARMONY = ToolSyntax("harmony", "to=functions.", args_marker="<|message|>")
GRANITE = ToolSyntax("granite", "<|tool_call|>")
DEEPSEEK = ToolSyntax("deepseek", CALLS_BEGIN, CALLS_END, deepseek=True, inner=(CALL_BEGIN, SEP, CALL_END))
# Command R7B: [{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}, ...] between action markers.
COMMAND_R = ToolSyntax("command-r", "<|START_ACTION|>", "<|END_ACTION|>")
SYNTAXES = {s.name: s for s in (HERMES, LLAMA3, MISTRAL, QWEN_XML, HARMONY, GRANITE, DEEPSEEK, COMMAND_R)}


def supports_tools(template: str | None) -> bool:
    """The chat template renders a `tools` list (a template that never names it ignores any)."""
    return bool(template) and _MENTIONS_TOOLS.search(template) is not None


def detect(template: str | None, vocab: Collection[str] = (), family: str | None = None) -> ToolSyntax:
    """The syntax this model writes calls in; Hermes's when nothing says otherwise (the fallback's)."""
    text = template or ""
    if "<|channel|>" in text or family == "gpt-oss":
        return HARMONY
    if "[TOOL_CALLS]" in text or "[TOOL_CALLS]" in vocab:
        return MISTRAL
    if "<|tool_call|>" in text:
        return GRANITE
    if CALL_BEGIN in text or CALL_BEGIN in vocab:
        return DEEPSEEK
    if "<|START_ACTION|>" in text:
        return COMMAND_R
    if "<function=" in text and "<parameter=" in text:
        return QWEN_XML
    if "<tool_call>" in text or "<tool_call>" in vocab:
        return HERMES
    if "<|python_tag|>" in vocab or (family or "").startswith("llama3") or '"parameters": ' in text:
        return LLAMA3
    return HERMES
