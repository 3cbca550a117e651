"""Fitting a conversation into the model's context with room left for the answer.

The oldest turns go first (never the system prompt). Where the caller asks (the app's tool loop), the
turn being answered is kept whole but for its tool results: a result too long to fit (a large file
read back, a long listing) is cut in the middle, with a note saying so, rather than ending the answer
with "context full"; its beginning and end stay, which is where a file's header and a command's errors
are, and the model can ask for a narrower part.
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
    the last message leaves none). prompt_tokens renders messages; count_tokens counts a text's tokens."""
    system = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(system) :])
    dropped = 0
    kept: dict[int, int] = {}  # the tool results being cut: their index in rest, and how many characters stay
    while True:
        shown = [replace(m, content=cut_middle(m.content, kept[i])) if i in kept else m for i, m in enumerate(rest)]
        tokens = prompt_tokens(system + shown)
        over = len(tokens) + room - n_ctx
        if over <= 0:
            break
        answered = max((i for i, m in enumerate(rest) if m.role == "user"), default=0)  # the turn's question
        if cut_tool_results and answered == 0:  # only the turn being answered is left: its results give way
            if not _cut_further(rest, kept, over, count_tokens):
                break
            continue
        if len(rest) <= 1:
            break
        # Drop the oldest exchange; keep the conversation starting with a user message.
        rest.pop(0)
        dropped += 1
        while len(rest) > 1 and rest[0].role != "user":
            rest.pop(0)
            dropped += 1
    if len(tokens) >= n_ctx:
        with_system = " with the system prompt" if system else ""
        raise ContextFullError(
            f"The message is {len(tokens):,} tokens long{with_system}, "
            f"but the context holds {n_ctx:,}: no room is left for an answer."
        )
    return Fitted(tokens, dropped, len(kept))


def _cut_further(rest: list[ChatMessage], kept: dict[int, int], over: int, count_tokens) -> bool:
    """Keep about `over` tokens fewer of the longest tool result still shown (False: there is none)."""

    def shown(i: int) -> int:
        return kept.get(i, len(rest[i].content))

    results = [i for i, m in enumerate(rest) if m.role == "tool" and shown(i) > 0]
    if not results:
        return False
    i = max(results, key=shown)
    text = rest[i].content
    chars_per_token = len(text) / max(count_tokens(text), 1)
    tokens_to_go = over + (0 if i in kept else NOTE_TOKENS)
    kept[i] = max(0, shown(i) - math.ceil(tokens_to_go * chars_per_token))
    return True
