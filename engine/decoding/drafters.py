"""Where draft tokens come from: the draft model, the target's MTP head, prompt lookup, or the user's history.

Every drafter answers the loop the same way (llama.cpp's common_speculative: begin, draft,
accept): begin an answer, offer what it could draft this round, draft when chosen, learn from
what the target kept. Each keeps its own counters and acceptance trackers and prices its own
step, so a new drafter is a new class in Speculator's list.

A Draft carries the proposed tokens and, for a sampled model drafter, the distributions they were
drawn from (the rejection rule needs p_draft). Lookup and history drafts are deterministic: p_draft is None.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.acceptance import Verdict
from engine.decoding.lookup import NgramIndex
from engine.decoding.policy import (
    DRIFT,
    AcceptanceTracker,
    ConfidenceCalibration,
    CostModel,
    RoundEstimate,
    RoundShape,
    confidence_floor,
)
from engine.decoding.sampling import Distribution, distribution, greedy_token
from engine.errors import DecodeError
from engine.history.store import HistoryIndex
from engine.history.suffix_index import MAX_MATCH, MAX_ROWS, SEP, SuffixIndex, most_frequent_path
from engine.llama.memory import CheckpointKind
from engine.llama.mtp import MtpHead
from engine.llama.runner import ModelRunner, common_prefix

# A catch-up of at least this many tokens is timed into the draft model's prefill cost (shorter ones
# are mostly one decode's fixed overhead).
CATCH_UP_TIMED = 8


@dataclass
class Draft:
    drafter: DrafterKind
    draft_length: int = 0  # asked of the drafter this round
    tokens: list[int] = field(default_factory=list)
    p_draft: list[Distribution | None] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)  # a model drafter's top probability per token
    # A model drafter's floor applies to the chance that every token so far is accepted (the product
    # of its confidences: a token after a rejected one is wasted), not to each token alone (p_min as
    # the user sets it, llama.cpp's meaning).
    joint_floor: bool = False
    # How far the product of its confidences is to be trusted (ConfidenceCalibration.joint_ratio).
    trust: float = 1.0
    seconds: float = 0.0
    n_steps: int = 0  # model decode steps taken
    # A draft model that first had to evaluate the conversation it had not seen (a new prompt, a tool
    # result): how many tokens, and how long it took (inside seconds).
    caught_up: int = 0
    catch_up_s: float = 0.0
    source: TokenSource = TokenSource.TARGET  # what its accepted tokens are marked as

    def __len__(self) -> int:
        return len(self.tokens)

    def end_at(self, is_end: Callable[[int], bool]) -> None:
        """Drop what follows the first token that ends the answer: it ends the answer if accepted, so
        verifying more is paid for and never used (a draft model at an answer's end, or lookup
        continuing into the prompt's next turn, runs on past it)."""
        end = next((i for i, token in enumerate(self.tokens) if is_end(token)), None)
        if end is not None:
            del self.tokens[end + 1 :], self.p_draft[end + 1 :], self.confidence[end + 1 :]


NO_DRAFT = Draft(DrafterKind.NONE)


@dataclass(frozen=True)
class TrackerKey:
    """Which acceptance record scores an offer: the drafter's kind, and for a matching drafter the
    band of its match length (a 20-token match is a different bet from a 3-token one)."""

    kind: DrafterKind
    band: int | None = None


@dataclass(frozen=True)
class Offer:
    """What one drafter could draft this round, for auto to score."""

    drafter: Drafter
    key: TrackerKey
    k_max: int  # the most tokens it can draft now
    match_length: int = 0  # tokens of context behind a matching drafter's proposal (0: a model)
    behind: int = 0  # tokens a model drafter must evaluate before its first draft token (ModelDrafter.behind)
    # Per token of a matching drafter's proposal, the share of the earlier occurrences that went on so
    # (empty: all of them, or not known): where they split, the proposal is a guess, and auto says so.
    support: tuple[float, ...] = ()


class Drafter(ABC):
    """One source of draft tokens, asked the same way as every other each round."""

    kind: ClassVar[DrafterKind]
    source: ClassVar[TokenSource]
    needs_probes: ClassVar[bool] = False  # learns only from its own drafts, so auto must try it (ModelDrafter)
    stops_when_unsure: ClassVar[bool] = False  # ends its own draft below a confidence floor (ModelDrafter)
    modes: ClassVar[frozenset[DrafterMode]]  # the settings that ask it
    fallback_modes: ClassVar[frozenset[DrafterMode]] = frozenset()  # ... only when no drafter before it offered
    # Acceptance expected before any is seen, (first, next) per band; none: AcceptanceTracker's own.
    PRIORS: ClassVar[dict[int | None, tuple[float, float]]] = {}

    def __init__(self):
        self.trackers: dict[TrackerKey, AcceptanceTracker] = {}
        self.n_drafted = self.n_accepted = 0
        self.rounds_unused = 0  # rounds since it last drafted (this session)

    def asked(self, spec: SpecParams, earlier: Sequence[Offer]) -> bool:
        """Whether the settings ask it this round; earlier: the offers of the drafters asked before it."""
        return spec.mode in self.modes or (spec.mode in self.fallback_modes and not earlier)

    def begin(self, spec: SpecParams, greedy: bool = True) -> None:  # noqa: B027 - most keep nothing per answer
        """A new answer starts (greedy: at temperature 0)."""

    @abstractmethod
    def offer(self, context: Sequence[int], k_cap: int, earlier: Sequence[Offer]) -> Offer | None:
        """What it could draft after context (None: nothing this round)."""

    @abstractmethod
    def draft(
        self,
        context: Sequence[int],
        k: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        p_min: float,
        joint: bool = False,
    ) -> Draft:
        """Up to k tokens after context, for the offer it made this round; p_min: a model's floor of
        confidence, for each token or (joint) for the chance that all so far are accepted."""

    def accept(self, draft: Draft, verdict: Verdict) -> None:
        """The target verified this round's draft, whoever drafted it."""
        if draft.drafter == self.kind:
            self.n_drafted += len(draft)
            self.n_accepted += verdict.n_accepted
            self.rounds_unused = 0
        else:
            self.rounds_unused += 1
        self.learn(draft, verdict)

    @abstractmethod
    def learn(self, draft: Draft, verdict: Verdict) -> None:
        """Update its acceptance from a verified round."""

    def tracker(self, key: TrackerKey | None = None) -> AcceptanceTracker:
        key = key or TrackerKey(self.kind)
        if key not in self.trackers:
            self.trackers[key] = AcceptanceTracker(*self.PRIORS.get(key.band, ()))
        return self.trackers[key]

    def forget(self) -> None:
        """Back to the priors: nothing learned, nothing counted."""
        self.trackers.clear()
        self.n_drafted = self.n_accepted = 0

    def memory(self) -> dict[str, dict]:
        """What its trackers learned, as JSON, by band ("-" for none): auto's memory (engine.decoding.auto_memory)."""
        return {("-" if key.band is None else str(key.band)): t.counts() for key, t in self.trackers.items()}

    def recall(self, memory: dict) -> None:
        """Take memory() written earlier, by this or an earlier run; unknown or malformed entries are skipped."""
        for band, counts in memory.items() if isinstance(memory, dict) else ():
            if band == "-" or (isinstance(band, str) and band.isdigit()):
                key = TrackerKey(self.kind, None if band == "-" else int(band))
                if isinstance(counts, dict):
                    self.tracker(key).recall(counts)

    # -- its cost, as auto prices it -------------------------------------------------------------

    def catch_up_cost(self, costs: CostModel, n_tokens: int) -> float:
        """What evaluating n_tokens of context would cost it before it drafts."""
        return 0.0

    def step_s(self, costs: CostModel) -> float:
        """What one drafted token costs it: nothing for a drafter that runs no model."""
        return 0.0

    def confidence_floor(self, costs: CostModel, k: int, joint: bool = False, rate: float | None = None) -> float:
        """Below what confidence it stops drafting (rate: the tokens/s the round is expected to give)."""
        return 0.0

    def measured_rounds(self, costs: CostModel) -> RoundEstimate | None:
        """What its rounds yield and cost where it ends them on its own confidence (None: it does not)."""
        return None

    def observe_cost(self, costs: CostModel, draft: Draft) -> None:  # noqa: B027 - a lookup costs nothing to time
        """Time what drafting cost into the CostModel."""


def match_band(match_length: int) -> int:
    """The acceptance band of a match this many tokens long: 1, 2, 3, then 4+, 8+ and 16+."""
    return 16 if match_length >= 16 else 8 if match_length >= 8 else 4 if match_length >= 4 else match_length


class MatchDrafter(Drafter):
    """Continues a match of the context's end without running a model (lookup, history).

    Its whole proposal is known before the round, so how far it would have gone is known for free:
    it is followed against the tokens the target goes on to produce, round after round, until it
    misses or runs out, whether the round drafted from it, drafted part of it, or drafted nothing.
    This is how auto notices that an answer has started copying, and learns that a copy run
    continues beyond the few tokens it dared to draft.

    A long match usually goes on as before (SuffixDecoding's observation on the user's history, and
    what a quote of the prompt does), so its priors let auto draft from it at once instead of after
    a shadow run; the trackers correct them. Short matches start from AcceptanceTracker's own.
    """

    PRIORS = {4: (0.5, 0.7), 8: (0.7, 0.85), 16: (0.8, 0.9)}

    def __init__(self):
        super().__init__()
        self.proposal: list[int] = []
        self.shadow: _Shadow | None = None

    @abstractmethod
    def match(self, context: Sequence[int], k_cap: int) -> tuple[list[int], int, list[float]]:
        """Up to k_cap tokens continuing context's end, how many tokens of context matched, and per token
        the share of the matches that went on so ([]: not known)."""

    def band(self, match_length: int) -> int:
        """The acceptance band of a match this long."""
        return match_band(match_length)

    def begin(self, spec: SpecParams, greedy: bool = True) -> None:
        self.shadow = None  # a proposal from another answer says nothing about this one

    def offer(self, context: Sequence[int], k_cap: int, earlier: Sequence[Offer]) -> Offer | None:
        tokens, match_length, support = self.match(context, k_cap)
        # A drafter asked earlier (the current conversation) keeps priority where it matches at least as far back.
        if not tokens or any(o.match_length >= match_length for o in earlier):
            return None
        key = TrackerKey(self.kind, self.band(match_length))
        self.proposal = list(tokens)
        if self.shadow is None:
            self.shadow = _Shadow(key, self.proposal)
        return Offer(self, key, len(tokens), match_length, support=tuple(support))

    def draft(self, context, k, sampling, rng, p_min, joint=False) -> Draft:
        tokens = self.proposal[:k]
        return Draft(self.kind, k, tokens, [None] * len(tokens), source=self.source)

    def learn(self, draft: Draft, verdict: Verdict) -> None:
        produced = draft.tokens[: verdict.n_accepted] + [verdict.next_token]
        if self.shadow is not None and self.shadow.follow(produced):
            self.tracker(self.shadow.key).observe(len(self.shadow.tokens), self.shadow.matched)
            self.shadow = None

    def forget(self) -> None:
        super().forget()
        self.shadow = None


def joined_index(sequences: Sequence[Sequence[int]]) -> SuffixIndex | None:
    """One suffix index over token sequences, a separator between them (none: None)."""
    pieces = [np.asarray(q, np.int32) for q in sequences if len(q)]
    separated = [part for q in pieces for part in (q, np.array([SEP], np.int32))]
    return SuffixIndex(np.concatenate(separated)) if pieces else None


class LookupDrafter(MatchDrafter):
    """Prompt lookup over the conversation so far (prompt plus the answer being written), and over the
    prompt's tool results as a tool call's JSON string would quote them (use_quotes): an edit's old_text
    copies the file read_file returned, but with its newlines and quotes escaped, which the prompt's own
    tokens never match beyond one line."""

    kind = DrafterKind.LOOKUP
    source = TokenSource.LOOKUP
    modes = frozenset({DrafterMode.AUTO, DrafterMode.LOOKUP, DrafterMode.BOTH})
    QUOTE_MIN_MATCH = 3

    def __init__(self, n_min: int = 1, n_max: int = 4):
        super().__init__()
        self.index = NgramIndex(n_min, n_max)
        self.quotes: SuffixIndex | None = None
        self.weigh_share = True  # scale a match's chance by its n-gram's share (at temperature 0; see begin)

    def use_quotes(self, quoted: Sequence[Sequence[int]]) -> None:
        """Also draft from these token sequences (the prompt's texts as quoted in JSON) until told otherwise."""
        self.quotes = joined_index(quoted)

    def begin(self, spec: SpecParams, greedy: bool = True) -> None:
        super().begin(spec, greedy)
        # Discounting a match by its n-gram's share paid at temperature 0 and was no gain above it
        # (README, How auto decides): there a lookup match is judged by its rates alone.
        self.weigh_share = greedy
        if (self.index.n_min, self.index.n_max) != (spec.lookup_ngram_min, spec.lookup_ngram_max):
            self.index = NgramIndex(spec.lookup_ngram_min, spec.lookup_ngram_max)

    def match(self, context: Sequence[int], k_cap: int) -> tuple[list[int], int, list[float]]:
        tokens = self.index.propose(context, k_cap)
        length = self.index.last_match_length
        found = self.quotes.longest_match(context) if self.quotes is not None else None
        if found is not None and found.length >= max(self.QUOTE_MIN_MATCH, length + 1):
            rows = self.quotes.continuations(found.starts[:MAX_ROWS], MAX_MATCH)
            quoted, support = most_frequent_path(rows, k_cap, 0.0)
            if quoted:
                return quoted, found.length, support
        return tokens, length, [self.index.last_share] if tokens and self.weigh_share else []


class HistoryDrafter(MatchDrafter):
    """The most frequent continuation, in the user's earlier conversations, of the longest match
    of the context's end (SuffixDecoding's rule): it drafts up to twice as many tokens as
    matched, and only while at least MIN_SHARE of the earlier occurrences went on that way."""

    kind = DrafterKind.HISTORY
    source = TokenSource.HISTORY
    modes = frozenset({DrafterMode.AUTO})
    MIN_MATCH = 3  # shorter matches are everywhere in a large history and say little
    MIN_SHARE = 0.3

    def __init__(self, index: HistoryIndex):
        super().__init__()
        self.index = index

    def asked(self, spec: SpecParams, earlier: Sequence[Offer]) -> bool:
        return spec.history and super().asked(spec, earlier)

    def match(self, context: Sequence[int], k_cap: int) -> tuple[list[int], int, list[float]]:
        proposal = self.index.propose(context, k_cap, self.MIN_MATCH, self.MIN_SHARE)
        return proposal.tokens, proposal.match_length, proposal.support


class DocumentDrafter(MatchDrafter):
    """Continues a match of the context's end in the user's documents: the passages found for this
    answer, in its prompt and those that did not fit (Engine.chat(documents=...)), and the whole
    text of the collections searched (collection_drafts.py), where a longer match wins (a found
    passage at equal length: it is the likelier one). Asked before lookup, so a quote of a passage
    in the prompt counts as the documents' (at equal match length the earlier drafter wins), and a
    quote of one that did not fit, or that no search found, drafts too. Between answers it holds
    nothing; what auto learned of its matches (by band, as lookup's) stays."""

    kind = DrafterKind.DOCUMENTS
    source = TokenSource.DOCUMENTS
    modes = frozenset({DrafterMode.AUTO, DrafterMode.LOOKUP, DrafterMode.BOTH})  # wherever lookup drafts
    MIN_MATCH = 2
    MIN_SHARE = 0.3

    def __init__(self):
        super().__init__()
        self.indexes: list[SuffixIndex] = []  # the passages found, then the collections' whole text

    def use(self, documents: Sequence[Sequence[int]], whole: SuffixIndex | None = None) -> None:
        """Draft from these token sequences and the collections' index (none: nothing) until told otherwise."""
        self.indexes = [index for index in (joined_index(documents), whole) if index is not None]

    def asked(self, spec: SpecParams, earlier: Sequence[Offer]) -> bool:
        return bool(self.indexes) and super().asked(spec, earlier)

    def match(self, context: Sequence[int], k_cap: int) -> tuple[list[int], int, list[float]]:
        index, found = None, None
        for candidate in self.indexes:
            match = candidate.longest_match(context)
            if found is None or match.length > found.length:
                index, found = candidate, match
        if found is None or found.length < self.MIN_MATCH:
            return [], 0, []
        rows = index.continuations(found.starts[:MAX_ROWS], MAX_MATCH)
        # A long match is a quote: it may go on as far as the round allows; a short one about as far as it matched.
        k = k_cap if found.length >= 8 else min(k_cap, 2 * found.length)
        tokens, support = most_frequent_path(rows, k, self.MIN_SHARE)
        return tokens, found.length, support


class ModelDrafter(Drafter):
    """Runs a model token by token, stopping early when it is unsure. How well its confidence predicts
    acceptance is calibrated (its adaptive p_min), and its steps are timed into the CostModel.

    Unlike a match drafter it learns nothing unless it drafts, so auto probes it now and then
    (Speculator._probe); while another drafter is used, what it learned fades only slowly (DRIFT).
    """

    needs_probes = True  # auto learns its acceptance only by drafting with it
    stops_when_unsure = True

    def __init__(self):
        super().__init__()
        self.calibration = ConfidenceCalibration()
        self.shape = RoundShape()  # its rounds at temperature 0, where its confidence ends them

    @abstractmethod
    def extend(
        self, draft: Draft, context: Sequence[int], sampling: SamplingParams, rng: np.random.Generator, p_min: float
    ) -> None:
        """Add up to draft.draft_length tokens to draft (_take decides each)."""

    @abstractmethod
    def measured_step_s(self, costs: CostModel) -> float | None:
        """One of its steps, as the CostModel has it (None: not measured)."""

    @abstractmethod
    def observe_step(self, costs: CostModel, seconds: float) -> None: ...

    def ready(self, context: Sequence[int]) -> bool:
        return True

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of context its model has not evaluated, beyond the last one that every step evaluates:
        after a new prompt or a tool result, hundreds, which on a CPU cost more than a short answer."""
        return 0

    def offer(self, context: Sequence[int], k_cap: int, earlier: Sequence[Offer]) -> Offer | None:
        if not self.ready(context):
            return None
        return Offer(self, TrackerKey(self.kind), k_cap, behind=self.behind(context))

    def draft(self, context, k, sampling, rng, p_min, joint=False) -> Draft:
        t0 = time.perf_counter()
        trust = self.calibration.joint_ratio if joint else 1.0
        draft = Draft(self.kind, k, source=self.source, joint_floor=joint, trust=trust)
        self.extend(draft, context, sampling, rng, p_min)
        draft.seconds = time.perf_counter() - t0
        return draft

    def learn(self, draft: Draft, verdict: Verdict) -> None:
        if draft.drafter == self.kind:
            self.tracker().observe(len(draft), verdict.n_accepted)
            self.calibration.observe(draft.confidence, verdict.n_accepted)
            if draft.joint_floor:
                self.shape.observe(len(draft), draft.n_steps, verdict.n_accepted)
        else:
            # Untried: drift slowly back towards the prior.
            self.tracker().decay(DRIFT)
            self.calibration.decay(DRIFT)
            self.shape.decay(DRIFT)

    def forget(self) -> None:
        super().forget()
        self.calibration = ConfidenceCalibration()
        self.shape = RoundShape()
        self.rounds_unused = 0

    def memory(self) -> dict[str, dict]:
        """Its rates, and beside them what its rounds were, how well its confidence predicted them, and
        how long it has gone unused (when to probe it again)."""
        memory = super().memory()
        if "-" in memory:
            memory["-"] |= {
                "rounds": self.shape.counts(),
                "confidence": self.calibration.counts(),
                "unused": self.rounds_unused,
            }
        return memory

    def recall(self, memory: dict) -> None:
        super().recall(memory)
        kept = memory.get("-") if isinstance(memory, dict) else None
        if not isinstance(kept, dict):
            return
        if isinstance(kept.get("rounds"), dict):
            self.shape.recall(kept["rounds"])
        if isinstance(kept.get("confidence"), dict):
            self.calibration.recall(kept["confidence"])
        if isinstance(kept.get("unused"), int) and 0 <= kept["unused"] < 10**9:
            self.rounds_unused = kept["unused"]

    def measured_rounds(self, costs: CostModel) -> RoundEstimate:
        return self.shape.estimate(costs, self.step_s(costs))

    def step_s(self, costs: CostModel) -> float:
        return self.measured_step_s(costs) or costs.step_s

    def confidence_floor(self, costs: CostModel, k: int, joint: bool = False, rate: float | None = None) -> float:
        # A joint floor is compared with corrected confidences (Draft.trust): not corrected twice.
        return confidence_floor(costs, k, self.measured_step_s(costs), None if joint else self.calibration, rate)

    def observe_cost(self, costs: CostModel, draft: Draft) -> None:
        self.observe_step(costs, (draft.seconds - draft.catch_up_s) / max(draft.n_steps, 1))


class DraftModelDrafter(ModelDrafter):
    """Autoregressive drafting with the small model."""

    kind = DrafterKind.DRAFT_MODEL
    source = TokenSource.DRAFT_MODEL
    modes = frozenset({DrafterMode.AUTO, DrafterMode.DRAFT_MODEL})
    fallback_modes = frozenset({DrafterMode.BOTH})  # lookup when it matches, the draft model otherwise

    def __init__(self, runner: ModelRunner):
        super().__init__()
        self.runner = runner

    def behind(self, context: Sequence[int]) -> int:
        return max(len(context) - 1 - common_prefix(self.runner.cached, context), 0)

    def catch_up_cost(self, costs: CostModel, n_tokens: int) -> float:
        return n_tokens * (costs.draft_prefill_s or costs.draft_step_s or costs.step_s)

    def extend(self, draft, context, sampling, rng, p_min) -> None:
        seq = list(context)
        if self.behind(seq) > 1:  # timed apart: a catch-up is priced per token, not as a draft step
            t0 = time.perf_counter()
            self.runner.eval(seq[:-1], 0)
            draft.caught_up, draft.catch_up_s = self.runner.last_decoded, time.perf_counter() - t0
        for step in range(draft.draft_length):
            # A recurrent draft keeps a checkpoint where this proposal starts: the next round goes back to it.
            keep = CheckpointKind.ROUND if step == 0 and self.runner.memory.needs_checkpoints else None
            logits = self.runner.eval(seq, 1, checkpoint=keep)[0]
            draft.n_steps += 1
            if not _take(draft, logits, sampling, rng, p_min) or self.runner.is_eog(draft.tokens[-1]):
                break  # unsure, or the answer would end here (nothing after it is ever used)
            seq.append(draft.tokens[-1])

    def measured_step_s(self, costs: CostModel) -> float | None:
        return costs.draft_step_s

    def observe_step(self, costs: CostModel, seconds: float) -> None:
        costs.observe_draft_step(seconds)

    def observe_cost(self, costs: CostModel, draft: Draft) -> None:
        super().observe_cost(costs, draft)
        if draft.caught_up >= CATCH_UP_TIMED:
            costs.observe_draft_prefill(draft.catch_up_s / draft.caught_up)


class MtpDrafter(ModelDrafter):
    """Drafting with the target's own MTP head: each step feeds the head's hidden state forward."""

    kind = DrafterKind.MTP
    source = TokenSource.MTP
    modes = frozenset({DrafterMode.AUTO, DrafterMode.MTP})

    def __init__(self, head: MtpHead):
        super().__init__()
        self.head = head

    def ready(self, context: Sequence[int]) -> bool:
        """The head follows the target up to the last committed token (not so on an answer's first round)."""
        return self.head.can_draft(len(context) - 1)

    def extend(self, draft, context, sampling, rng, p_min) -> None:
        token, position, hidden = context[-1], len(context) - 1, None
        try:
            for _ in range(draft.draft_length):
                logits, own = self.head.step(token, position, hidden)
                draft.n_steps += 1
                if not _take(draft, logits, sampling, rng, p_min):
                    break
                token, position, hidden = draft.tokens[-1], position + 1, own.copy()
        except DecodeError:
            pass  # the head failed (it says why and drafts no more): verify what it drafted so far

    def measured_step_s(self, costs: CostModel) -> float | None:
        return costs.mtp_step_s

    def observe_step(self, costs: CostModel, seconds: float) -> None:
        costs.observe_mtp_step(seconds)


class _Shadow:
    """A matching drafter's offer, followed against what the target produced, drafted or not."""

    def __init__(self, key: TrackerKey, tokens: list[int]):
        self.key, self.tokens, self.matched = key, list(tokens), 0

    def follow(self, produced: list[int]) -> bool:
        """Compare with the next produced tokens; True once the outcome is known."""
        for token in produced:
            if self.tokens[self.matched] != token:
                return True
            self.matched += 1
            if self.matched == len(self.tokens):
                return True
        return False


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
    sure = min(1.0, draft.trust * float(np.prod([*draft.confidence, confidence]))) if draft.joint_floor else confidence
    if sure < p_min and draft.tokens:
        return False
    draft.tokens.append(token)
    draft.p_draft.append(p)
    draft.confidence.append(confidence)
    return True


def _top_probability(logits: np.ndarray, top: int) -> float:
    """Softmax probability of the argmax, without materialising the distribution."""
    z = logits - logits[top]
    return float(1.0 / np.exp(z, dtype=np.float32).sum())
