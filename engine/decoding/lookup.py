"""Prompt lookup: propose the tokens that followed the last time the current n-gram appeared.

Answers that quote, edit or rewrite text the conversation already holds repeat long runs of it;
finding those runs costs a dictionary lookup, no model.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MATCH = 32  # how far back a match is followed: long enough to tell a quote from a phrase


class NgramIndex:
    """For each n-gram of the history, the position just after its most recent occurrence, and how
    often each token has followed it.

    Extended incrementally as tokens arrive; rebuilt when the history is not an extension of
    what was indexed (a new conversation, an edited message). A proposal says how long its match
    is: the n-gram, followed further back (up to MAX_MATCH tokens) while the two places agree, so
    an answer quoting the prompt shows as a long match, not as yet another 4-gram. It also says
    which share of the n-gram's occurrences went on with the proposed token: an n-gram that went
    on differently before is a poor bet (over the project's prompts, a first token of a match
    1-4 tokens long was accepted about 0.3-0.7 of the time where the n-gram had gone on one way
    only, and about a share of that where not).
    """

    def __init__(self, n_min: int = 1, n_max: int = 4):
        assert 1 <= n_min <= n_max
        self.n_min, self.n_max = n_min, n_max
        self._tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}
        self._followers: dict[tuple[int, ...], dict[int, int]] = {}  # n-gram -> token -> times it followed
        self.last_match_length = 0  # tokens of agreement behind the last proposal (0: no match)
        self.last_share = 0.0  # of the matched n-gram's occurrences, the share followed by the proposal's first token

    def sync(self, history: Sequence[int]) -> None:
        n = len(self._tokens)
        if len(history) < n or list(history[:n]) != self._tokens:
            self._tokens, self._next, self._followers, n = [], {}, {}, 0
        for i in range(n, len(history)):
            token = history[i]
            self._tokens.append(token)
            # The n-grams ending just before token i are now known to be followed by it.
            for size in range(self.n_min, min(self.n_max, i) + 1):
                gram = tuple(self._tokens[i - size : i])
                self._next[gram] = i
                followers = self._followers.setdefault(gram, {})
                followers[token] = followers.get(token, 0) + 1

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Up to k tokens continuing the longest n-gram at the end of history that occurred before."""
        self.sync(history)
        tokens = self._tokens
        for size in range(min(self.n_max, len(tokens)), self.n_min - 1, -1):
            gram = tuple(tokens[len(tokens) - size :])
            start = self._next.get(gram)
            if start is not None:
                followers = self._followers[gram]
                self.last_share = followers[tokens[start]] / sum(followers.values())
                length, end = size, len(tokens)
                while length < MAX_MATCH and start > length and tokens[start - length - 1] == tokens[end - length - 1]:
                    length += 1
                self.last_match_length = length
                return tokens[start : start + k]
        self.last_match_length, self.last_share = 0, 0.0
        return []
