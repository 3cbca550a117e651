"""A suffix array over token ids: the longest earlier match of a context's end, and what followed it.

Pure numpy, no I/O. The corpus is stored reversed, so that "the longest suffix of the context
that occurred before" becomes "the longest prefix of the reversed context among the reversed
corpus's suffixes": one narrowing of a sorted interval, a token at a time (SuffixDecoding's
suffix-tree walk, arXiv 2411.04975, with a suffix array instead of a tree: 8 bytes a token).

Documents are separated by SEP, which no context contains, so a match never spans two documents.
The array is sorted only to MAX_MATCH tokens, the longest match ever looked for, which bounds
the build at five sorting passes. Removing whole documents keeps the order valid without
re-sorting (see remove): a lookup only ever compares tokens before a document's SEP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SEP = -1  # between documents
PAD = -2  # beyond either end of the corpus: sorts before everything
MAX_MATCH = 32  # tokens of context matched at most; also the sort depth
SMALL = 64  # below this many rows, a level is narrowed with one vectorised search
MAX_ROWS = 256  # occurrences read to choose a continuation (the most frequent among them)


@dataclass(frozen=True)
class Match:
    """The longest earlier occurrence(s) of the context's end: length in tokens, and for each
    occurrence the forward position in the corpus where its continuation starts."""

    length: int
    starts: np.ndarray  # int64 forward positions

    @property
    def count(self) -> int:
        return len(self.starts)


NO_MATCH = Match(0, np.zeros(0, np.int64))


def build_suffix_array(reversed_tokens: np.ndarray, depth: int = MAX_MATCH) -> np.ndarray:
    """Positions of reversed_tokens ordered by the first `depth` tokens of the suffix there
    (prefix doubling: ranks of 1, 2, 4, ... tokens combined until the depth is reached or
    every suffix is distinct). Positions holding SEP are left out: nothing starts a match there."""
    n = len(reversed_tokens)
    if n == 0:
        return np.zeros(0, np.int32)
    # Dense ranks from 1, in token order (SEP lowest); 0 stands for "beyond the end".
    _, rank = np.unique(reversed_tokens, return_inverse=True)
    rank = rank.astype(np.int64).reshape(-1) + 1
    order = np.argsort(rank, kind="stable")
    width = 1
    while width < depth and int(rank.max()) < n:
        following = np.zeros(n, np.int64)
        following[: n - width] = rank[width:]
        key = rank * (n + 1) + following
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        new_rank = np.empty(n, np.int64)
        new_rank[order] = np.concatenate(([1], 1 + np.cumsum(sorted_key[1:] != sorted_key[:-1])))
        rank = new_rank
        width *= 2
    order = order.astype(np.int32)
    return order[reversed_tokens[order] != SEP]


class SuffixIndex:
    """An immutable corpus (forward token ids, SEP between documents) and its suffix array."""

    def __init__(self, tokens: np.ndarray, suffix_array: np.ndarray | None = None):
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        self.n = len(tokens)
        # The reversed corpus with MAX_MATCH pads at both ends: reading past either end needs no checks.
        self._buf = np.concatenate(
            [np.full(MAX_MATCH, PAD, np.int32), tokens[::-1], np.full(MAX_MATCH + 1, PAD, np.int32)]
        )
        self.sa = build_suffix_array(self.reversed) if suffix_array is None else np.asarray(suffix_array, np.int32)
        # memoryviews index ~5x faster than numpy scalars in the probe loop.
        self._buf_mv = memoryview(self._buf)
        self._sa_mv = memoryview(self.sa)

    @property
    def reversed(self) -> np.ndarray:
        return self._buf[MAX_MATCH : MAX_MATCH + self.n]

    @property
    def tokens(self) -> np.ndarray:
        """The forward corpus (a view)."""
        return self.reversed[::-1]

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes + self.sa.nbytes

    def longest_match(self, context: Sequence[int], max_length: int = MAX_MATCH) -> Match:
        """The longest run at the end of context that occurs in the corpus, and where each
        occurrence's continuation starts (at most MAX_ROWS of them)."""
        lo, hi, length = 0, len(self.sa), 0
        if hi == 0:
            return NO_MATCH
        pattern = [int(t) for t in list(context[-max_length:])[::-1]]
        if SEP in pattern or PAD in pattern:
            pattern = pattern[: min(pattern.index(v) for v in (SEP, PAD) if v in pattern)]
        # Wide intervals: narrow a token at a time by binary search.
        while length < len(pattern) and hi - lo > SMALL:
            token = pattern[length]
            new_lo = self._bound(lo, hi, length, token, right=False)
            new_hi = self._bound(new_lo, hi, length, token, right=True)
            if new_lo == new_hi:
                break
            lo, hi, length = new_lo, new_hi, length + 1
        if length < len(pattern) and hi - lo <= SMALL:
            rows = self.sa[lo:hi].astype(np.int64)
            # Few rows left: compare the rest of the pattern against all of them at once. The rows
            # that match furthest are the final interval (they sit together in the sorted order).
            rest = np.asarray(pattern[length:], np.int32)
            window = self._buf[rows[:, None] + (MAX_MATCH + length) + np.arange(len(rest))[None, :]]
            runs = np.cumprod(window == rest[None, :], axis=1).sum(axis=1)
            best = int(runs.max())
            rows, length = rows[runs == best], length + best
        else:
            rows = self.sa[lo : min(hi, lo + MAX_ROWS)].astype(np.int64)
        if length == 0:
            return NO_MATCH
        rows = rows[:MAX_ROWS]
        # Reversed position j begins the match; forward, the match ends at n-1-j and continues at n-j.
        return Match(length, self.n - rows)

    def _bound(self, lo: int, hi: int, offset: int, token: int, right: bool) -> int:
        buf, sa, shift = self._buf_mv, self._sa_mv, MAX_MATCH + offset
        while lo < hi:
            mid = (lo + hi) // 2
            value = buf[sa[mid] + shift]
            if value < token or (right and value == token):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def continuations(self, starts: np.ndarray, k: int) -> np.ndarray:
        """A row of the k forward tokens from each start (PAD beyond the corpus)."""
        # Forward position f is reversed position n-1-f, at buffer index MAX_MATCH+n-1-f; the next
        # forward tokens run backwards through the buffer.
        first = MAX_MATCH + self.n - 1 - starts
        k = min(k, MAX_MATCH)
        return self._buf[first[:, None] - np.arange(k)[None, :]]

    def remove(self, keep: np.ndarray) -> SuffixIndex:
        """A new index of the forward tokens where keep is True (whole documents with their SEP).

        No re-sort: each remaining suffix keeps its tokens up to its document's SEP, and a lookup
        never compares beyond one (a context holds no SEP), so the old order still serves.
        """
        keep = np.asarray(keep, bool)
        keep_rev = keep[::-1]
        dropped_before = np.cumsum(~keep_rev) - (~keep_rev)  # dropped positions before each reversed one
        kept_rows = self.sa[keep_rev[self.sa]]
        new_sa = (kept_rows - dropped_before[kept_rows]).astype(np.int32)
        return SuffixIndex(self.tokens[keep], new_sa)


def brute_force_match(tokens: np.ndarray, context: Sequence[int], max_length: int = MAX_MATCH) -> Match:
    """longest_match for a small, unsorted corpus (the documents added since the last sort)."""
    if len(tokens) == 0 or not len(context):
        return NO_MATCH
    tail = [int(t) for t in context[-max_length:]]
    if tail[-1] < 0:
        return NO_MATCH
    ends = np.flatnonzero(tokens[:-1] == tail[-1])  # a match must leave something to continue with
    length = 1 if len(ends) else 0
    for back in range(1, len(tail)):
        token = tail[-1 - back]
        if token < 0:
            break
        ok = ends >= back
        narrower = ends[ok][tokens[ends[ok] - back] == token]
        if not len(narrower):
            break
        ends, length = narrower, back + 1
    if length == 0:
        return NO_MATCH
    return Match(length, (ends[-MAX_ROWS:] + 1).astype(np.int64))  # the most recent occurrences


def most_frequent_path(rows: np.ndarray, max_length: int, min_probability: float) -> tuple[list[int], list[float]]:
    """Walk the continuations as a trie, taking the most frequent next token each step, while the
    path's share of the occurrences stays at or above min_probability. Returns the tokens and, per
    token, the share of the occurrences that went on as the path does up to it (auto's support)."""
    width = min(max_length, rows.shape[1] if rows.ndim == 2 and len(rows) else 0)
    if width <= 0:
        return [], []
    rows = rows[:, :width]
    # Where every occurrence goes on alike (the common case), take that run in one step.
    agree = (rows == rows[0]).all(axis=0) & (rows[0] >= 0)
    run = width if agree.all() else int(np.argmin(agree))
    tokens = rows[0, :run].tolist()
    shares = [1.0] * run
    share, alive = 1.0, rows
    for column in range(run, width):
        values = alive[:, column]
        values = values[values >= 0]
        if not len(values):
            break
        ids, counts = np.unique(values, return_counts=True)
        best = int(np.argmax(counts))
        step = counts[best] / len(alive)
        if share * step < min_probability:
            break
        share *= step
        token = int(ids[best])
        tokens.append(token)
        shares.append(share)
        alive = alive[alive[:, column] == token]
    return tokens, shares
