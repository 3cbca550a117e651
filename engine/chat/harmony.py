"""gpt-oss's answers, split by channel as the text streams (OpenAI's "harmony" format).

A gpt-oss answer is a series of messages rather than one text: each has a header naming its channel
(and, for a tool call, its recipient), `<|message|>`, its body, and an end marker:

    <|channel|>analysis<|message|>The user asks…<|end|>
    <|start|>assistant<|channel|>final<|message|>It is 21 °C in Paris.<|return|>
    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(the recipient may also stand before the channel: `<|start|>assistant to=functions.get_weather<|channel|>…`).
The analysis channel is the model's thinking; the final channel, and commentary addressed to no one
(a preamble before a call), are its answer. A message to `functions.NAME` is a tool call: its header
from `to=` on and its body go on as the answer's text, where engine/tools reads them (tools.HARMONY),
and nothing else of the markup is shown. Text that may be the start of a marker is held back until it
is clear, as engine/chat/reasoning.py does; an answer that does not open with a header (a model that
ignores the format) is all answer.
"""

from __future__ import annotations

import re

from engine.chat.reasoning import Part, PieceSplitter, _partial_suffix

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
# Every marker the splitter reads: the engine has each shown as its text, control token or not.
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
_ENDS = (END, CALL, RETURN, START)  # a message's body runs to the first of these
_HEADER_OPENINGS = (CHANNEL, START, "assistant", " to=", "to=")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*(\w+)")
CALL_RECIPIENT = "functions."  # tool calls go to functions.NAME


def is_harmony(family: str | None, template: str | None) -> bool:
    """The model writes harmony: gpt-oss's vocabulary, or a template that writes channels."""
    return family == "gpt-oss" or CHANNEL in (template or "")


class HarmonySplitter(PieceSplitter):
    """Splits a harmony answer: analysis is the thinking, the rest the answer (PieceSplitter's interface)."""

    def __init__(self):
        super().__init__()
        self.state = "header"  # "header": reading a message's header; "body": its body
        self.kind = "answer"  # the body being read: "reasoning", "answer" or "call"

    def _release(self, final: bool) -> list[Part]:
        out: list[Part] = []
        while self._held:
            text = "".join(p.text for p in self._held)
            if self.state == "header":
                if not self._read_header(text, final, out):
                    break
                continue
            at = min((i for i in (text.find(m) for m in _ENDS) if i >= 0), default=-1)
            if at >= 0:
                out += self._body(at)
                end = next(m for m in _ENDS if text.startswith(m, at))
                self._drop(len(end) if end != START else 0)  # <|start|> opens the next header: kept for it
                self.state, self.kind = "header", "answer"
                continue
            keep = 0 if final else max(_partial_suffix(text, m) for m in _ENDS)
            out += self._body(len(text) - keep)
            break
        if self.kind == "reasoning" and self.state == "body":
            self.n_reasoning_tokens = self._pushed
        self.reasoning += "".join(part.piece.text for part in out if part.reasoning)
        return [part for part in out if part.piece.text]

    def _read_header(self, text: str, final: bool, out: list[Part]) -> bool:
        """A message's header, once whole (True: read on): it sets the body's kind and is not shown, but for
        a call's `to=functions.NAME…`, which the tool-call parser reads."""
        at = text.find(MESSAGE)
        if at < 0:
            opening = text.lstrip()
            if final and (CHANNEL in text or START in text):
                self._drop(len(text))  # the answer ended inside a header: nothing of it to show
                return False
            if not final and (
                not opening or any(opening.startswith(h) or h.startswith(opening) for h in _HEADER_OPENINGS)
            ):
                return False  # only whitespace, or what may be a header, yet
            self.state, self.kind = "body", "answer"  # no header: not harmony after all
            return True
        header = text[:at]
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        if recipient and recipient.group(1).startswith(CALL_RECIPIENT):
            self.kind = "call"
            self._drop(recipient.start())
            out += self._body(at + len(MESSAGE) - recipient.start())
        else:
            self.kind = "reasoning" if channel and channel.group(1) == "analysis" else "answer"
            self.entered = self.entered or self.kind == "reasoning"
            self._drop(at + len(MESSAGE))
        self.state = "body"
        return True

    def _body(self, n: int) -> list[Part]:
        """The first n characters of the held text, as the current body's."""
        return self._take(n, self.kind == "reasoning")
