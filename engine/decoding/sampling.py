"""Logits to probabilities under the sampling settings, and drawing from them. Pure numpy.

The processing order follows llama.cpp's default chain (top-k, top-p, min-p, then
temperature), so a user moving from llama.cpp sees the same behaviour. The target and the draft
go through exactly this function, which is what makes rejection sampling lossless.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from engine.config import SamplingParams


@dataclass(frozen=True)
class Distribution:
    """A probability distribution over a candidate set of token ids (the rest has probability 0).

    ids are ordered by decreasing probability; probs sum to 1.
    """

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64

    @staticmethod
    def point(token: int) -> Distribution:
        return Distribution(np.array([token], dtype=np.int64), np.array([1.0]))

    @property
    def top(self) -> int:
        return int(self.ids[0])

    @property
    def top_prob(self) -> float:
        return float(self.probs[0])

    def prob_of(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def probs_at(self, ids: np.ndarray) -> np.ndarray:
        """Probabilities of arbitrary ids (0 outside the candidate set)."""
        order = np.argsort(self.ids)
        sorted_ids = self.ids[order]
        pos = np.searchsorted(sorted_ids, ids)
        pos = np.minimum(pos, len(sorted_ids) - 1)
        found = sorted_ids[pos] == ids
        return np.where(found, self.probs[order][pos], 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        if len(self.ids) == 1:
            return int(self.ids[0])
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def drawn_with(self, key: int) -> int:
        """The token a position's key draws (Draws.at): the candidate whose log-probability plus its own
        Gumbel noise, a function of the key and the token's id alone, is highest, which is a draw from
        these probabilities (the Gumbel-max trick). Each candidate's noise is its own, so rounding that
        nudges the probabilities (another batch width's) changes the token only where two scores nearly tie,
        and a candidate at the edge of top-p that one width keeps and another cuts only where it is drawn."""
        if len(self.ids) == 1:
            return int(self.ids[0])
        return int(self.ids[np.argmax(self._scores(key, self.ids, self.probs))])

    @staticmethod
    def _scores(key: int, ids: np.ndarray, probs: np.ndarray) -> np.ndarray:
        mixed = _mix(np.uint64(key) ^ ids.astype(np.uint64))
        u = ((mixed >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53  # in (0, 1)
        with np.errstate(divide="ignore"):  # a probability that underflowed to 0 scores -inf: never drawn
            return np.log(probs) - np.log(-np.log(u))


def keyed_scores(p: Distribution, key: int, tokens: list[int]) -> np.ndarray:
    """What drawn_with compares: each token's log-probability plus its noise under the key; -inf for a token
    outside the candidate set (top-k, top-p or min-p cut it)."""
    ids = np.asarray(tokens, dtype=np.int64)
    return Distribution._scores(key, ids, p.probs_at(ids))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: 64 well-mixed bits from any 64 (uint64 arithmetic wraps, as it should)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def greedy_token(logits: np.ndarray) -> int:
    """Argmax straight from the logits row: no softmax, no copy."""
    return int(np.argmax(logits))


def distribution(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The distribution the next token is drawn from. Greedy is a point mass on the argmax."""
    if params.greedy:
        return Distribution.point(greedy_token(logits))
    n_vocab = logits.shape[-1]
    # Candidate set: top-k first, because it is the cheap O(n) cut that makes the rest small.
    if 0 < params.top_k < n_vocab:
        if logits.min() == -np.inf:
            # A grammar's mask: numpy's partition over some 150,000 equal -inf takes ~12 ms (a third of a
            # decoding step on a CPU); what is allowed is all that can be drawn, so partition only that.
            allowed = np.flatnonzero(logits > -np.inf)
            if len(allowed) > params.top_k:
                cut = len(allowed) - params.top_k
                allowed = allowed[np.argpartition(logits[allowed], cut)[cut:]]
            ids = allowed
        else:
            ids = np.argpartition(logits, n_vocab - params.top_k)[n_vocab - params.top_k :]
        raw = logits[ids].astype(np.float64)
        p = np.exp(raw - raw.max())
        p /= p.sum()
    else:
        # Whole vocabulary: normalise in float32 once, keep float64 only for what survives min-p.
        shifted = logits - logits.max()
        z = float(np.exp(shifted, dtype=np.float32).sum(dtype=np.float64))
        floor = np.log(params.min_p) if params.min_p > 0.0 else -np.inf
        ids = np.flatnonzero(shifted >= floor)
        raw = logits[ids].astype(np.float64)
        p = np.exp(shifted[ids].astype(np.float64)) / z
    # min-p keeps tokens at least min_p times as likely as the best: a ratio, so it is the same
    # before or after the renormalisations around it. Applying it first shrinks the sort below.
    if params.min_p > 0.0:
        keep = p >= params.min_p * p.max()
        ids, raw, p = ids[keep], raw[keep], p[keep]
    order = np.argsort(-p, kind="stable")
    ids, raw, p = ids[order], raw[order], p[order]
    if params.top_p < 1.0:
        # Smallest prefix whose mass (measured over the top-k set, as llama.cpp does) reaches top_p.
        n_keep = int(np.searchsorted(np.cumsum(p), params.top_p - 1e-9, side="left")) + 1
        ids, raw = ids[:n_keep], raw[:n_keep]
    scaled = raw / params.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    return Distribution(ids.astype(np.int64), probs)


def residual(p_target: Distribution, p_draft: Distribution) -> Distribution | None:
    """normalize(max(p_target - p_draft, 0)): where a rejected draft token sends the sample.

    None when the two are equal (nothing left over); the caller then samples p_target.
    """
    left = np.maximum(p_target.probs - p_draft.probs_at(p_target.ids), 0.0)
    total = left.sum()
    if total <= 1e-12:
        return None
    keep = left > 0
    ids, probs = p_target.ids[keep], left[keep] / total
    order = np.argsort(-probs, kind="stable")
    return Distribution(ids[order], probs[order])


def make_rng(seed: int | None) -> np.random.Generator:
    return np.random.default_rng(seed)


class Draws:
    """What each position of a conversation draws its token with: a key made from the seed and the position
    alone, whatever was drafted before (Distribution.drawn_with). Plain decoding draws every token so, and
    speculation keeps a fixed drafted token (lookup, history, your documents) only where it is the target's
    own draw at its position (so with probability p_target(x), as the rejection rule keeps it): with a seed,
    the answer is plain decoding's, token for token, up to the rounding of batch widths. A draft model's
    sampled tokens go through the rejection rule instead (it keeps more of them), with the answer's own
    random stream."""

    def __init__(self, seed: int | None):
        self.seed = secrets.randbits(64) if seed is None else seed % 2**64

    def at(self, position: int) -> int:
        return int(np.random.default_rng([self.seed, position]).integers(0, 2**64, dtype=np.uint64))
