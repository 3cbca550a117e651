"""Where draft tokens come from: the draft model, the target's MTP head, prompt lookup, or the user's history.

A Draft carries the proposed tokens and, for a sampled draft model, the distributions they were
drawn from (the rejection rule needs p_draft). Lookup and history drafts are deterministic: p_draft is None.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.config import DrafterKind, SamplingParams, TokenSource
from engine.decoding.lookup import NgramIndex
from engine.decoding.sampling import Distribution, distribution, greedy_token
from engine.errors import DecodeError
from engine.history.store import NO_PROPOSAL, HistoryIndex, Proposal
from engine.llama.memory import CheckpointKind
from engine.llama.mtp import MtpHead
from engine.llama.runner import ModelRunner

_SOURCES = {
    DrafterKind.LOOKUP: TokenSource.LOOKUP,
    DrafterKind.HISTORY: TokenSource.HISTORY,
    DrafterKind.DRAFT_MODEL: TokenSource.DRAFT_MODEL,
    DrafterKind.MTP: TokenSource.MTP,
}


@dataclass
class Draft:
    drafter: DrafterKind
    draft_length: int = 0  # asked of the drafter this round
    tokens: list[int] = field(default_factory=list)
    p_draft: list[Distribution | None] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)  # the draft model's top probability per token
    seconds: float = 0.0
    n_steps: int = 0  # draft-model decode steps taken

    @property
    def source(self) -> TokenSource:
        return _SOURCES.get(self.drafter, TokenSource.DRAFT_MODEL)

    def __len__(self) -> int:
        return len(self.tokens)


NO_DRAFT = Draft(DrafterKind.NONE)


class LookupDrafter:
    """Prompt lookup over the conversation so far (prompt plus the answer being written)."""

    kind = DrafterKind.LOOKUP

    def __init__(self, n_min: int = 1, n_max: int = 4):
        self.index = NgramIndex(n_min, n_max)

    def candidates(self, history: Sequence[int], k_max: int) -> list[int]:
        return self.index.propose(history, k_max)

    @property
    def last_match_size(self) -> int:
        return self.index.last_match_size


class HistoryDrafter:
    """The most frequent continuation, in the user's earlier conversations, of the longest match
    of the context's end (SuffixDecoding's rule): it drafts up to twice as many tokens as
    matched, and only while at least MIN_SHARE of the earlier occurrences went on that way."""

    kind = DrafterKind.HISTORY
    MIN_MATCH = 3  # shorter matches are everywhere in a large history and say little
    MIN_SHARE = 0.3
    # Acceptance expected before any is seen, (first, next) per band of match length: a long match
    # of the user's own earlier words usually goes on as before (SuffixDecoding's observation), so
    # auto may draft from it at once instead of after a long shadow run; the tracker corrects it.
    PRIORS = {3: (0.5, 0.5), 4: (0.5, 0.7), 8: (0.7, 0.85), 16: (0.8, 0.9)}

    def __init__(self, index: HistoryIndex):
        self.index = index
        self.last = NO_PROPOSAL

    def propose(self, history: Sequence[int], k_max: int) -> Proposal:
        self.last = self.index.propose(history, k_max, self.MIN_MATCH, self.MIN_SHARE)
        return self.last

    def tracker_key(self) -> str:
        """Acceptance is tracked per band of match length: a 20-token match is a different bet from a 3-token one."""
        length = self.last.match_length
        band = 16 if length >= 16 else 8 if length >= 8 else 4 if length >= 4 else self.MIN_MATCH
        return f"{DrafterKind.HISTORY.value}:{band}"

    @classmethod
    def prior(cls, key: str) -> tuple[float, float] | None:
        """The starting rates for a tracker key of this drafter (None: not one of its keys)."""
        kind, _, band = key.partition(":")
        return cls.PRIORS.get(int(band)) if kind == DrafterKind.HISTORY.value and band.isdigit() else None


class DraftModelDrafter:
    """Autoregressive drafting with the small model, stopping early when it is unsure."""

    kind = DrafterKind.DRAFT_MODEL

    def __init__(self, runner: ModelRunner):
        self.runner = runner

    def propose(
        self,
        history: Sequence[int],
        draft_length: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        p_min: float,
    ) -> Draft:
        t0 = time.perf_counter()
        draft = Draft(self.kind, draft_length)
        seq = list(history)
        for step in range(draft_length):
            # A recurrent draft keeps a checkpoint where this proposal starts: the next round goes back to it.
            keep = CheckpointKind.ROUND if step == 0 and self.runner.memory.needs_checkpoints else None
            logits = self.runner.eval(seq, 1, checkpoint=keep)[0]
            draft.n_steps += 1
            if not _take(draft, logits, sampling, rng, p_min):
                break
            seq.append(draft.tokens[-1])
        draft.seconds = time.perf_counter() - t0
        return draft


class MtpDrafter:
    """Drafting with the target's own MTP head: each step feeds the head's hidden state forward."""

    kind = DrafterKind.MTP

    def __init__(self, head: MtpHead):
        self.head = head

    def ready(self, history: Sequence[int]) -> bool:
        """The head follows the target up to the last committed token (not so on an answer's first round)."""
        return self.head.can_draft(len(history) - 1)

    def propose(
        self,
        history: Sequence[int],
        draft_length: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        p_min: float,
    ) -> Draft:
        t0 = time.perf_counter()
        draft = Draft(self.kind, draft_length)
        token, position, hidden = history[-1], len(history) - 1, None
        try:
            for _ in range(draft_length):
                logits, own = self.head.step(token, position, hidden)
                draft.n_steps += 1
                if not _take(draft, logits, sampling, rng, p_min):
                    break
                token, position, hidden = draft.tokens[-1], position + 1, own.copy()
        except DecodeError:
            pass  # the head failed (it says why and drafts no more): verify what it drafted so far
        draft.seconds = time.perf_counter() - t0
        return draft


def _take(draft: Draft, logits: np.ndarray, sampling: SamplingParams, rng, p_min: float) -> bool:
    """Choose the next draft token from a drafter's logits and add it, unless the drafter is too unsure.
    Decided from the distribution alone, never from the sampled token: stays lossless."""
    if sampling.greedy:
        token = greedy_token(logits)
        confidence = _top_probability(logits, token)
        p = None
    else:
        p = distribution(logits, sampling)
        token, confidence = p.sample(rng), p.top_prob
    if confidence < p_min and draft.tokens:
        return False
    draft.tokens.append(token)
    draft.p_draft.append(p)
    draft.confidence.append(confidence)
    return True


def _top_probability(logits: np.ndarray, top: int) -> float:
    """Softmax probability of the argmax, without materialising the distribution."""
    z = logits - logits[top]
    return float(1.0 / np.exp(z, dtype=np.float32).sum())
