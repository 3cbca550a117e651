"""An answer's events with its tool calls read out of the text (engine/tools/parser.py).

The parser sees only the text the answer streams, after speculation has verified it: drafting and
acceptance are untouched, so tool calls cost nothing in losslessness. TokenEvents of a call's
markup are marked tool_call (a front end folds them into the call's block), each complete call
follows as a ToolCallEvent, and the DoneEvent lists the calls, its text without their markup.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from engine.decoding.events import (
    DoneEvent,
    Event,
    FinishReason,
    MalformedToolCallEvent,
    TokenEvent,
    ToolCallEvent,
)
from engine.tools import Found, Span, ToolCall, ToolCallParser


def with_tool_calls(events: Iterator[Event], parser: ToolCallParser) -> Iterator[Event]:
    """events with tool calls parsed; an answer that stopped after calling ends with FinishReason.TOOL_CALLS."""
    for event in events:
        if isinstance(event, TokenEvent) and not event.reasoning:
            yield from _events(parser.push(event.text, event))
        elif isinstance(event, DoneEvent):
            yield from _events(parser.finish())
            finish = event.finish_reason
            if parser.calls and finish == FinishReason.STOP:
                finish = FinishReason.TOOL_CALLS
            called = parser.calls or parser.malformed
            yield replace(
                event,
                finish_reason=finish,
                text=parser.text.strip() if called else parser.text,
                tool_calls=tuple(parser.calls),
                malformed_calls=tuple(parser.malformed),
            )
        else:
            yield event


def _events(outputs: list) -> Iterator[Event]:
    for out in outputs:
        if isinstance(out, Span):
            yield replace(out.item, text=out.text, tool_call=out.call)
        elif isinstance(out, Found):
            yield ToolCallEvent(out.call) if isinstance(out.call, ToolCall) else MalformedToolCallEvent(out.call)
