"""Prompt lookup: propose the tokens that followed the last time the current n-gram appeared.

Answers that quote, edit or rewrite text the conversation already holds repeat long runs of it;
finding those runs costs a dictionary lookup, no model.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MATCH = 32  # how far back a match is followed: long enough to tell a quote from a phrase


class NgramIndex:
    """For each n-gram of the history, the position just after its most recent occurrence.

    Extended incrementally as tokens arrive; rebuilt when the history is not an extension of
    what was indexed (a new conversation, an edited message). A proposal says how long its match
    is: the n-gram, followed further back (up to MAX_MATCH tokens) while the two places agree, so
    an answer quoting the prompt shows as a long match, not as yet another 4-gram.
    """

    def __init__(self, n_min: int = 1, n_max: int = 4):
        assert 1 <= n_min <= n_max
        self.n_min, self.n_max = n_min, n_max
        self._tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}
        self.last_match_length = 0  # tokens of agreement behind the last proposal (0: no match)

    def sync(self, history: Sequence[int]) -> None:
        n = len(self._tokens)
        if len(history) < n or list(history[:n]) != self._tokens:
            self._tokens, self._next, n = [], {}, 0
        for i in range(n, len(history)):
            self._tokens.append(history[i])
            # The n-grams ending just before token i are now known to be followed by it.
            for size in range(self.n_min, min(self.n_max, i) + 1):
                self._next[tuple(self._tokens[i - size : i])] = i

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Up to k tokens continuing the longest n-gram at the end of history that occurred before."""
        self.sync(history)
        tokens = self._tokens
        for size in range(min(self.n_max, len(tokens)), self.n_min - 1, -1):
            start = self._next.get(tuple(tokens[len(tokens) - size :]))
            if start is not None:
                length, end = size, len(tokens)
                while length < MAX_MATCH and start > length and tokens[start - length - 1] == tokens[end - length - 1]:
                    length += 1
                self.last_match_length = length
                return tokens[start : start + k]
        self.last_match_length = 0
        return []
