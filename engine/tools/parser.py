"""Tool calls out of an answer's text as it streams, in the model family's syntax (engine/tools/syntax.py).

Text goes in piece by piece (a token's text, with whatever the caller keeps beside it); what comes
out is Spans, each the whole or a part of one pushed piece marked as text or as call markup, and a
Found record as each call completes: a ToolCall, or a MalformedToolCall with the raw text and why.
Text that may be the start of a call's marker is held back until it is clear either way, as
engine/chat/reasoning.py holds back a thinking marker; text around calls is released as it comes.
A call is parsed from JSON and checked (a name, one of the tools offered, arguments an object);
anything else is reported, never repaired.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from engine.tools.calls import MalformedToolCall, ToolCall, new_call_id
from engine.tools.deepseek_calls import DeepSeekCallError, parse_deepseek_calls
from engine.tools.syntax import ToolSyntax
from engine.tools.xml_calls import XmlCallError, parse_xml_call

_DECODER = json.JSONDecoder()
_NAME = re.compile(r"[^\s<]*")
FENCE, FENCE_END = "```json", "```"


@dataclass(frozen=True)
class Span:
    """Text of one pushed piece (all of it, or a part): the answer's text, or a tool call's markup."""

    item: Any  # what the caller pushed with it (a token event)
    text: str
    call: bool


@dataclass(frozen=True)
class Found:
    """A call completed: parsed, or reported malformed. It follows the Spans of its markup."""

    call: ToolCall | MalformedToolCall


Output = Span | Found


class ToolCallParser:
    def __init__(
        self,
        syntax: ToolSyntax,
        tool_names: Collection[str] = (),
        new_id: Callable[[], str] | None = None,
        schemas: Mapping[str, dict] | None = None,
    ):
        """tool_names: the tools offered (a call to another is malformed); empty accepts any name.
        schemas: their parameters' JSON schemas by name, which type the values of XML calls."""
        self.syntax = syntax
        self.tool_names = set(tool_names)
        self.schemas = dict(schemas or {})
        self._new_id = new_id or (lambda: new_call_id(short=syntax.short_ids))
        self._held: list[list] = []  # [text, item] not yet released
        self._in_call = False
        self._bare = False  # the call is a bare JSON object (Llama 3), not after a marker
        self._fenced = False  # the call may be a JSON object in a code fence: text unless it is a call
        self._at_start = True  # nothing but whitespace released so far
        self._call_text = ""  # the current call's markup released so far
        self.calls: list[ToolCall] = []
        self.malformed: list[MalformedToolCall] = []
        self.text = ""  # the answer's text released so far (calls' markup left out)

    def push(self, text: str, item: Any = None) -> list[Output]:
        """Add one piece; return what is now certain."""
        self._held.append([text, item])
        return self._release(final=False)

    def finish(self) -> list[Output]:
        """The answer ended: an unfinished call is parsed as it stands (or reported), held text released."""
        return self._release(final=True)

    # -- the state machine ---------------------------------------------------------------------

    def _release(self, final: bool) -> list[Output]:
        out: list[Output] = []
        while True:
            text = "".join(t for t, _ in self._held)
            if not self._in_call:
                if not self._scan_text(text, final, out):
                    break
            elif not self._scan_call(text, final, out):
                break
        if final:  # pieces with no text of their own (a silent token) left at the end
            out += self._take(sum(len(t) for t, _ in self._held), call=False)
        return out

    def _scan_text(self, text: str, final: bool, out: list[Output]) -> bool:
        """Outside a call: release text up to a marker (True: a call began, scan again)."""
        opening = self.syntax.opening
        at = text.find(opening)
        fence = text.find(FENCE) if self.syntax.lenient else -1
        if fence >= 0 and (at < 0 or fence < at):
            out += self._take(fence, call=False)
            self._begin_call()
            self._fenced = True
            return True
        if at >= 0:
            out += self._take(at, call=False)
            self._begin_call()
            out += self._take(len(opening), call=True)
            return True
        if self.syntax.bare_json and self._at_start:
            body = text.lstrip()
            if body.startswith("{"):
                out += self._take(len(text) - len(body), call=False)
                self._begin_call(bare=True)
                return True
            if not body and not final:
                return False  # only whitespace yet
        keep = 0 if final else _partial_suffix(text, opening)
        if self.syntax.lenient and not final:
            keep = max(keep, _partial_suffix(text, FENCE))
        out += self._take(len(text) - keep, call=False)
        return False

    def _scan_call(self, text: str, final: bool, out: list[Output]) -> bool:
        """Inside a call: once it is complete (or the answer ended), parse it (True: scan on)."""
        s = self.syntax
        if self._fenced:
            return self._scan_fence(text, final, out)
        if s.closing and not self._bare:
            at = text.find(s.closing)
            if at < 0 and not final:
                return False
            end = at + len(s.closing) if at >= 0 else len(text)
            out += self._take(end, call=True)
            body = text[:at] if at >= 0 else text
            self._end_call(out, self._parse_body(body))
            return True
        body = text.lstrip()
        lead = len(text) - len(body)
        name = ""
        if s.args_marker and not body.startswith(("[", "{")):
            at = body.find(s.args_marker)
            if at < 0:
                if final:
                    out += self._take(len(text), call=True)
                    self._end_call(out, [MalformedToolCall(self._call_text, "the call ended before its arguments")])
                    return True
                return False
            # The name, without what may follow it before the marker (harmony's ` <|constrain|>json`).
            name = _NAME.match(body[:at].strip()).group()
            lead += at + len(s.args_marker)
            body = body[at + len(s.args_marker) :]
            lead += len(body) - len(body.lstrip())
            body = body.lstrip()
        try:
            value, end = _DECODER.raw_decode(body)
        except json.JSONDecodeError as e:
            if not final:
                return False
            if self._bare:  # an answer that only began like JSON: it was text all along
                self._in_call = False
                out += self._take(len(text), call=False)
                return True
            out += self._take(len(text), call=True)
            self._end_call(out, [MalformedToolCall(self._call_text, f"the call is not valid JSON: {e}")])
            return True
        if self._bare and not (_looks_like_call(value) and self._offered(value)):
            self._in_call = False  # JSON the user asked for, not a call
            out += self._take(lead + end, call=False)
            return True
        out += self._take(lead + end, call=True)
        if name:
            found = (
                self._checked(name, value)
                if isinstance(value, dict)
                else self._bad("the arguments are not a JSON object")
            )
            self._end_call(out, [found])
        else:
            self._end_call(out, self._from_value(value))
        return True

    def _scan_fence(self, text: str, final: bool, out: list[Output]) -> bool:
        """A ```json block: a call when its object is one to a tool offered, else text as written."""
        end = text.find(FENCE_END, len(FENCE))
        if end < 0 and not final:
            return False
        end = end + len(FENCE_END) if end >= 0 else len(text)
        try:
            value = json.loads(text[len(FENCE) : end].removesuffix(FENCE_END))
        except json.JSONDecodeError:
            value = None
        self._fenced = False
        if not (_looks_like_call(value) and self._offered(value)):
            self._in_call = False
            out += self._take(end, call=False)
            return True
        out += self._take(end, call=True)
        self._end_call(out, self._from_value(value))
        return True

    def _offered(self, value: Any) -> bool:
        """An unmarked call (lenient syntaxes) counts only when it names tools offered."""
        if not self.syntax.lenient or not self.tool_names:
            return True
        names = [v.get("name") for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict)]
        return all(n in self.tool_names for n in names)

    def _begin_call(self, bare: bool = False) -> None:
        self._in_call, self._bare, self._call_text = True, bare, ""
        self._at_start = False

    def _end_call(self, out: list[Output], found: list) -> None:
        for call in found:
            (self.calls if isinstance(call, ToolCall) else self.malformed).append(call)
            out.append(Found(call))
        self._in_call, self._bare = False, False

    # -- what a call's JSON says ------------------------------------------------------------------

    def _parse_body(self, body: str) -> list:
        """A call's body between its markers, in the syntax's form."""
        if self.syntax.xml:
            return self._parse_xml(body)
        if self.syntax.deepseek:
            return [
                self._bad(str(call)) if isinstance(call, DeepSeekCallError) else self._from_arguments(*call)
                for call in parse_deepseek_calls(body)
            ]
        return self._parse_object(body)

    def _parse_xml(self, body: str) -> list:
        try:
            name, arguments = parse_xml_call(body, self.schemas)
        except XmlCallError as e:
            return [self._bad(str(e))]
        return [self._checked(name, arguments)]

    def _parse_object(self, body: str) -> list:
        try:
            value = json.loads(body)
        except json.JSONDecodeError as e:
            return [self._bad(f"the call is not valid JSON: {e}")]
        return self._from_value(value)

    def _from_value(self, value: Any) -> list:
        """One call object, or a list of them (Mistral writes an array)."""
        if isinstance(value, list):
            if not value:
                return [self._bad("the list of calls is empty")]
            return [self._from_object(v) for v in value]
        return [self._from_object(value)]

    def _from_object(self, value: Any):
        if not isinstance(value, dict):
            return self._bad("a call must be a JSON object with a name and arguments")
        name = value.get("name", value.get("tool_name"))  # Command R7B names it tool_name
        return self._from_arguments(name, value.get("arguments", value.get("parameters")))

    def _from_arguments(self, name: Any, arguments: Any):
        if isinstance(arguments, str):  # some models write the arguments as a JSON string, as the API does
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                return self._bad(f"the arguments string is not JSON: {e}")
        if not isinstance(name, str) or not name:
            return self._bad("the call has no function name")
        if arguments is None:
            return self._bad(f"the call to {name} has no arguments")
        if not isinstance(arguments, dict):
            return self._bad(f"the arguments of {name} are not a JSON object")
        return self._checked(name, arguments)

    def _checked(self, name: str, arguments: dict):
        if self.tool_names and name not in self.tool_names:
            offered = ", ".join(sorted(self.tool_names))
            return self._bad(f"the model called {name!r}, which is not one of the tools offered ({offered})")
        return ToolCall(self._new_id(), name, arguments, self._call_text)

    def _bad(self, reason: str) -> MalformedToolCall:
        return MalformedToolCall(self._call_text, reason)

    # -- held text -------------------------------------------------------------------------------

    def _take(self, n: int, call: bool) -> list[Output]:
        """The first n characters of the held text, piece by piece (a piece may be cut in two)."""
        out: list[Output] = []
        while self._held and (n > 0 or not self._held[0][0]):
            text, item = self._held[0]
            if len(text) <= n:
                self._held.pop(0)
                out.append(Span(item, text, call))
                n -= len(text)
            else:
                out.append(Span(item, text[:n], call))
                self._held[0][0] = text[n:]
                n = 0
        for span in out:
            if call:
                self._call_text += span.text
            else:
                self.text += span.text
                if span.text.strip():
                    self._at_start = False
        return out


def _looks_like_call(value: Any) -> bool:
    """A bare JSON answer that is a call: an object with a name and its arguments (or a list of them)."""
    items = value if isinstance(value, list) and value else [value]
    return all(
        isinstance(v, dict) and isinstance(v.get("name"), str) and ("parameters" in v or "arguments" in v)
        for v in items
    )


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
