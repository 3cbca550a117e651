"""Fitting a conversation into the model's context with room left for the answer.

The oldest turns go first (never the system prompt). Where the caller asks (the app's tool loop), tool
results give way before anything else: those of older turns first (as agent hosts clear old tool results
before they drop turns), then the older turns themselves, and last the results of the turn being
answered, which is otherwise kept whole. A result is cut in the middle, with a note saying so, rather
than the answer ending with "context full": its beginning and end stay, which is where a file's header
and a command's errors are, and the model can ask for a narrower part.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

from engine.config import ChatMessage
from engine.errors import ContextFullError

CUT_NOTE = "\n[… {n:,} characters of this result left out here: it did not fit in the model's context …]\n"
HEAD_SHARE = 2 / 3  # of what is kept, the beginning's share (the rest is the end)
NOTE_TOKENS = 32  # a bound on CUT_NOTE's tokens


class Fitted(NamedTuple):
    tokens: list[int]  # the prompt
    dropped: int  # messages dropped from the front
    results_cut: int  # tool results cut in the middle


def cut_middle(text: str, keep_chars: int) -> str:
    """text with its middle replaced by CUT_NOTE, keep_chars of it kept (two thirds from the beginning)."""
    keep_chars = max(0, min(keep_chars, len(text)))
    if keep_chars == len(text):
        return text
    head = round(keep_chars * HEAD_SHARE)
    tail = keep_chars - head
    return text[:head] + CUT_NOTE.format(n=len(text) - keep_chars) + (text[len(text) - tail :] if tail else "")


def fit(
    messages: Sequence[ChatMessage],
    n_ctx: int,
    room: int,
    prompt_tokens: Callable[[list[ChatMessage]], list[int]],
    count_tokens: Callable[[str], int],
    cut_tool_results: bool = False,
) -> Fitted:
    """The conversation's prompt in n_ctx tokens with room left for the answer (ContextFullError if even
    the last message leaves none). prompt_tokens renders messages; count_tokens counts a text's tokens.

    Without cut_tool_results the oldest turns go until it fits or one message is left. With it, first the
    results of tools in older turns lose their middle (down to the note alone: what was asked and answered
    stays readable), then older turns go, then the results of the turn being answered lose their middle.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(system) :])
    kept: list[int | None] = [None] * len(rest)  # per message of rest: the characters of a cut result kept
    dropped = 0
    while True:
        shown = [
            m if k is None else replace(m, content=cut_middle(m.content, k)) for m, k in zip(rest, kept, strict=True)
        ]
        tokens = prompt_tokens(system + shown)
        over = len(tokens) + room - n_ctx
        if over <= 0:
            break
        answered = max((i for i, m in enumerate(rest) if m.role == "user"), default=0)  # the turn's question
        if cut_tool_results and _cut_further(rest, kept, answered, over, count_tokens):
            continue  # an older turn's result
        if len(rest) <= 1 or (cut_tool_results and answered == 0):
            if cut_tool_results and _cut_further(rest, kept, len(rest), over, count_tokens):
                continue  # a result of the turn being answered
            break
        # Drop the oldest exchange; keep the conversation starting with a user message.
        del rest[0], kept[0]
        dropped += 1
        while len(rest) > 1 and rest[0].role != "user":
            del rest[0], kept[0]
            dropped += 1
    if len(tokens) >= n_ctx:
        with_system = " with the system prompt" if system else ""
        raise ContextFullError(
            f"The message is {len(tokens):,} tokens long{with_system}, "
            f"but the context holds {n_ctx:,}: no room is left for an answer."
        )
    return Fitted(tokens, dropped, sum(k is not None for k in kept))


def _cut_further(rest: list[ChatMessage], kept: list[int | None], before: int, over: int, count_tokens) -> bool:
    """Keep about `over` tokens fewer of the longest tool result among rest[:before] that still shows some of
    itself (False: there is none)."""

    def shown(i: int) -> int:
        return len(rest[i].content) if kept[i] is None else kept[i]

    results = [i for i in range(before) if rest[i].role == "tool" and shown(i) > 0]
    if not results:
        return False
    i = max(results, key=shown)
    text = rest[i].content
    chars_per_token = len(text) / max(count_tokens(text), 1)
    tokens_to_go = over + (NOTE_TOKENS if kept[i] is None else 0)
    kept[i] = max(0, shown(i) - math.ceil(tokens_to_go * chars_per_token))
    return True
