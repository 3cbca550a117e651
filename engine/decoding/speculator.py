"""The streaming loop: draft, verify in one batch, accept, emit; repeat.

Each round keeps the last committed token apart and verifies [last, d1..dk] in one target
decode (llama.cpp's speculative-simple layout), so a round with nothing drafted is exactly a
plain decoding step. The runners' prefix-matching eval keeps both KV caches consistent on every
path out of the loop: finished, stopped, cancelled or failed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np

from engine.chat.reasoning import ReasoningSplitter
from engine.chat.textstream import TextStream
from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.acceptance import Verdict, verify_greedy, verify_sampled
from engine.decoding.drafters import NO_DRAFT, Draft, DraftModelDrafter, HistoryDrafter, LookupDrafter, MtpDrafter
from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, TokenEvent
from engine.decoding.policy import (
    AcceptanceTracker,
    ConfidenceCalibration,
    CostModel,
    best_choice,
    draft_confidence_floor,
)
from engine.decoding.sampling import Distribution, distribution, make_rng
from engine.decoding.stats import AnswerStats, Round
from engine.errors import ContextFullError, EngineError
from engine.history.store import HistoryIndex
from engine.llama.memory import CheckpointKind
from engine.llama.runner import Cancelled, ModelRunner

CALIBRATION_SIZES = (1, 2, 4, 8)
MODEL_DRAFTERS = (DrafterKind.DRAFT_MODEL, DrafterKind.MTP)  # drafters that run a model, token by token


class _TargetRows(Sequence):
    """The target's distributions for a verification batch, computed only when read."""

    def __init__(self, logits: np.ndarray, sampling: SamplingParams):
        self._logits, self._sampling, self._cache = logits, sampling, {}

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i: int) -> Distribution:
        i = i % len(self)
        if i not in self._cache:
            self._cache[i] = distribution(self._logits[i], self._sampling)
        return self._cache[i]


class Speculator:
    """Owns the drafting state of one target (and optional draft) across answers."""

    def __init__(
        self,
        target: ModelRunner,
        draft: ModelRunner | None = None,
        costs: CostModel | None = None,
        history: HistoryIndex | None = None,
    ):
        self.target = target
        # A recurrent draft whose state cannot go back would leave its cache wrong after a rejection.
        self.draft_runner = draft if draft is not None and not draft.rollback_problem else None
        self.draft_model = DraftModelDrafter(self.draft_runner) if self.draft_runner else None
        self.mtp = MtpDrafter(target.mtp) if target.mtp is not None else None
        self.lookup = LookupDrafter()
        self.history = HistoryDrafter(history) if history is not None else None
        self.last_answer: list[int] = []  # the tokens of the latest answer, for the history index
        self.costs = costs or self.calibrate()
        self.trackers: dict[str, AcceptanceTracker] = {}
        # How well each model drafter's own confidence predicts acceptance (its adaptive p_min).
        self.confidence = {kind: ConfidenceCalibration() for kind in MODEL_DRAFTERS}
        # Deterministic offers (lookup, history) being followed against what the target produces.
        self._shadows: dict[DrafterKind, _ShadowProposal] = {}

    def calibrate(self) -> CostModel:
        """Time target decodes of a few widths and one draft step (under a second on 2 CPU cores)."""
        verify = self.target.time_decodes(CALIBRATION_SIZES)
        draft_step = self.draft_runner.time_decodes([1])[1] if self.draft_runner else None
        rollback = self.target.time_rollback() if self._rolls_back else 0.0
        return CostModel(verify, draft_step, rollback, self.target.time_mtp_step() if self.mtp else None)

    @property
    def _rolls_back(self) -> bool:
        """Rejected drafts go back to a checkpoint (a recurrent memory), not by erasing in place."""
        return self.target.memory.needs_checkpoints

    @property
    def no_speculation_reason(self) -> str:
        """Why this target is decoded plainly whatever the settings say ("" when it can speculate)."""
        problem = self.target.rollback_problem
        return f"speculation off: {problem}, so a rejected draft could not be undone" if problem else ""

    def drop_draft_model(self) -> None:
        """Draft with prompt lookup only from now on (the draft model is being freed)."""
        self.draft_runner = None
        self.draft_model = None
        self.trackers.pop(DrafterKind.DRAFT_MODEL.value, None)

    def forget_acceptance(self) -> None:
        self.trackers.clear()
        self.confidence = {kind: ConfidenceCalibration() for kind in MODEL_DRAFTERS}
        self._shadows = {}

    def tracker(self, key: str) -> AcceptanceTracker:
        if key not in self.trackers:
            prior = HistoryDrafter.prior(key)
            self.trackers[key] = AcceptanceTracker(*prior) if prior else AcceptanceTracker()
        return self.trackers[key]

    # -- one answer ------------------------------------------------------------------------

    def stream(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        spec: SpecParams,
        cancel: threading.Event | None = None,
        stats: AnswerStats | None = None,
        t_request: float | None = None,
        reasoning: ReasoningSplitter | None = None,
    ) -> Iterator[Event]:
        """Stream the answer to prompt (token ids): per verification round a RoundEvent, then that
        round's TokenEvents; one DoneEvent last. reasoning, when given, splits a thinking block off
        the answer."""
        t_start = t_request or time.perf_counter()
        stats = stats or AnswerStats()
        stats.backend = self.target.backend
        if self.no_speculation_reason:
            spec = spec.with_(mode=DrafterMode.OFF)
            stats.plain_reason = self.no_speculation_reason
        rng = make_rng(sampling.seed)
        if (self.lookup.index.n_min, self.lookup.index.n_max) != (spec.lookup_ngram_min, spec.lookup_ngram_max):
            self.lookup = LookupDrafter(spec.lookup_ngram_min, spec.lookup_ngram_max)
        runners = [r for r in (self.target, self.draft_runner) if r is not None]
        for r in runners:
            r.cancel_event = cancel
        text = TextStream(sampling.stop)
        split = reasoning or ReasoningSplitter(thinking=False)
        answer: list[str] = []
        self._shadows = {}  # a proposal from another answer says nothing about this one
        self.last_answer = []
        committed = list(prompt)
        sources: Counter = Counter()
        finish, error = None, None
        t_gen = time.perf_counter()
        try:
            if len(prompt) >= self.target.n_ctx:
                raise ContextFullError(
                    f"The prompt is {len(prompt):,} tokens; the context holds {self.target.n_ctx:,}."
                )
            stats.n_prompt_tokens = len(prompt)
            # A checkpoint at the prompt's end: regenerate and the next turn start from it on a recurrent model.
            self.target.eval(prompt[:-1], 0, checkpoint=CheckpointKind.TURN)
            stats.n_prompt_evaluated = self.target.last_decoded + 1  # the last one goes with the first round
            t_gen = time.perf_counter()
            stats.prompt_s = t_gen - t_start
            while finish is None:
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                room = self.target.n_ctx - len(committed)
                if room <= 0:
                    finish = FinishReason.CONTEXT
                    break
                k_cap = min(
                    spec.max_draft_length, room - 1, sampling.max_tokens - stats.n_tokens - 1, self.target.n_batch - 1
                )
                if stats.n_rounds == 0:
                    k_cap = 0  # the first token is never held back by a draft's verification
                draft, offers = self._draft(committed, k_cap, sampling, spec, rng)
                t0 = time.perf_counter()
                speculative = CheckpointKind.ROUND if draft.tokens and self._rolls_back else None
                logits = self.target.eval(committed + draft.tokens, len(draft) + 1, checkpoint=speculative)
                t1 = time.perf_counter()
                verdict = self._verify(logits, draft, sampling, rng)
                t2 = time.perf_counter()
                self.costs.observe_verify(len(draft) + 1, t1 - t0)
                # Plain decoding pays one single-token step per token: priced from this round's own
                # timing, so a machine busier now than at calibration does not inflate the estimate.
                plain_step = (t1 - t0) * self.costs.verify_s(1) / self.costs.verify_s(len(draft) + 1)
                self._learn(draft, verdict, offers)
                new = draft.tokens[: verdict.n_accepted] + [verdict.next_token]
                origin = [draft.source] * verdict.n_accepted + [TokenSource.TARGET]
                # The round's tokens are taken in before its RoundEvent, so the event can say how many
                # the answer kept and what plain decoding would have paid for them; the TokenEvents follow.
                shown: list[TokenEvent] = []
                n_priced = n_kept = 0
                for token, source in zip(new, origin, strict=True):
                    n_priced += 1  # plain decoding pays a step for every token, the one that ends the answer too
                    if self.target.is_eog(token):
                        finish = FinishReason.STOP
                        break
                    committed.append(token)
                    n_kept += 1
                    sources[source.value] += 1
                    for part in split.push_all(text.push(token, self.target.piece(token), source)):
                        if not stats.ttft_s:
                            stats.ttft_s = time.perf_counter() - t_start
                        if split.entered and not stats.reasoning_s and not part.reasoning:
                            stats.reasoning_s = time.perf_counter() - t_gen
                        answer += [] if part.reasoning else [part.piece.text]
                        shown.append(TokenEvent(part.piece.token, part.piece.text, part.piece.source, part.reasoning))
                    if text.stopped:
                        finish = FinishReason.STOP
                        break
                    if stats.n_tokens + n_kept >= sampling.max_tokens:
                        finish = FinishReason.LENGTH
                        break
                t_rollback = 0.0
                if speculative and verdict.n_accepted < len(draft) and finish is None:
                    # The rejected tail is undone now, from the checkpoint, so the round pays for it.
                    t3 = time.perf_counter()
                    self.target.eval(committed[:-1], 0)
                    t_rollback = time.perf_counter() - t3
                    self.costs.observe_rollback(t_rollback)
                event = RoundEvent(
                    Round(draft.drafter, draft.draft_length, len(draft), verdict.n_accepted),
                    t_draft=draft.seconds,
                    t_verify=t1 - t0 + t_rollback,
                    t_sample=t2 - t1,
                    plain_s=plain_step * n_priced,
                    n_tokens=n_kept,
                    gen_s=time.perf_counter() - t_gen,
                )
                event.apply_to(stats)
                yield event
                yield from shown
        except Cancelled:
            finish = FinishReason.CANCELLED
        except ContextFullError as e:
            finish, error = FinishReason.CONTEXT, e.user_message()
        except EngineError as e:
            finish, error = FinishReason.ERROR, e.user_message()
        finally:
            for r in runners:
                r.cancel_event = None
            self.last_answer = committed[len(prompt) :]
        for part in split.push_all(text.finish(), final=True):
            answer += [] if part.reasoning else [part.piece.text]
            yield TokenEvent(part.piece.token, part.piece.text, part.piece.source, part.reasoning)
        # gen_s stays where the last round's event put it: the live figures end on the same one.
        stats.n_reasoning_tokens = split.n_reasoning_tokens
        if split.entered and not stats.reasoning_s:
            stats.reasoning_s = stats.gen_s  # it never stopped thinking
        stats.target_step_s = self.costs.step_s  # after this answer's own plain steps updated it
        stats.count_sources(sources)
        yield DoneEvent(finish, stats, "".join(answer), error, split.reasoning.strip())

    # -- the parts of a round ----------------------------------------------------------------

    def _draft(
        self, committed: list[int], k_cap: int, sampling: SamplingParams, spec: SpecParams, rng
    ) -> tuple[Draft, dict[DrafterKind, tuple[str, list[int]]]]:
        """This round's draft, and what the deterministic drafters offered (tracker key, tokens):
        used or not, an offer is scored against what the target produces."""
        mode = spec.mode
        if k_cap < 1 or mode == DrafterMode.OFF:
            return NO_DRAFT, {}
        options: dict[DrafterKind, tuple[tuple[float, float], int]] = {}
        offers: dict[DrafterKind, tuple[str, list[int]]] = {}
        if mode in (DrafterMode.AUTO, DrafterMode.LOOKUP, DrafterMode.BOTH):
            lookup_tokens = self.lookup.candidates(committed, k_cap)
            if lookup_tokens:
                offers[DrafterKind.LOOKUP] = (self._lookup_key(), lookup_tokens)
        if mode == DrafterMode.AUTO and spec.history and self.history is not None:
            offer = self.history.propose(committed, k_cap)
            # The current conversation keeps priority where it matches at least as far back.
            if offer.tokens and (DrafterKind.LOOKUP not in offers or offer.match_length > self.lookup.last_match_size):
                offers[DrafterKind.HISTORY] = (self.history.tracker_key(), offer.tokens)
        for kind, (key, tokens) in offers.items():
            options[kind] = (self.tracker(key).rates, len(tokens))
        wants_model = mode in (DrafterMode.AUTO, DrafterMode.DRAFT_MODEL) or (
            mode == DrafterMode.BOTH and DrafterKind.LOOKUP not in offers
        )
        if self.draft_model is not None and wants_model:
            options[DrafterKind.DRAFT_MODEL] = (self.tracker(DrafterKind.DRAFT_MODEL.value).rates, k_cap)
        if self.mtp is not None and mode in (DrafterMode.AUTO, DrafterMode.MTP) and self.mtp.ready(committed):
            options[DrafterKind.MTP] = (self.tracker(DrafterKind.MTP.value).rates, k_cap)
        if not options:
            return NO_DRAFT, offers
        if spec.draft_length is not None:
            options = {name: (rate, min(spec.draft_length, k_max)) for name, (rate, k_max) in options.items()}
        choice = best_choice(
            self.costs, options, allow_none=mode == DrafterMode.AUTO, fixed_k=spec.draft_length is not None
        )
        length = choice.draft_length
        if choice.drafter in offers:
            tokens = offers[choice.drafter][1][:length]
            return Draft(choice.drafter, length, tokens, [None] * len(tokens)), offers
        if choice.drafter in MODEL_DRAFTERS:
            drafter = self.draft_model if choice.drafter == DrafterKind.DRAFT_MODEL else self.mtp
            p_min = (
                spec.draft_p_min
                if spec.draft_p_min is not None
                else draft_confidence_floor(self.costs, length, self.confidence[choice.drafter], choice.drafter)
            )
            try:
                draft = drafter.propose(committed, length, sampling, rng, p_min)
            except ContextFullError:  # the draft's context is smaller than the target's: go on without it
                return NO_DRAFT, offers
            observe = self.costs.observe_mtp_step if drafter is self.mtp else self.costs.observe_draft_step
            observe(draft.seconds / max(draft.n_steps, 1))
            if spec.sample_and_match:
                draft.p_draft = [None] * len(draft)  # a point mass: accepted iff the target samples it
            return draft, offers
        return NO_DRAFT, offers

    def _lookup_key(self) -> str:
        return f"{DrafterKind.LOOKUP.value}:{min(self.lookup.last_match_size, 3)}"

    @staticmethod
    def _verify(logits: np.ndarray, draft: Draft, sampling: SamplingParams, rng) -> Verdict:
        if sampling.greedy:
            return verify_greedy(np.argmax(logits, axis=1).tolist(), draft.tokens)
        return verify_sampled(_TargetRows(logits, sampling), draft.tokens, draft.p_draft, rng)

    def _learn(self, draft: Draft, verdict: Verdict, offers: dict[DrafterKind, tuple[str, list[int]]]) -> None:
        produced = draft.tokens[: verdict.n_accepted] + [verdict.next_token]
        for kind in MODEL_DRAFTERS:
            if draft.drafter == kind:
                self.tracker(kind.value).observe(len(draft), verdict.n_accepted)
                self.confidence[kind].observe(draft.confidence, verdict.n_accepted)
            else:
                # Untried: drift back towards the prior, to be tried again.
                self.tracker(kind.value).decay()
                self.confidence[kind].decay()
        # Lookup and history are deterministic, so how far a whole offer would have gone is known
        # for free: follow it against the tokens the target goes on to produce, round after round,
        # until it misses or runs out — whether the round drafted from it, drafted part of it, or
        # drafted nothing. This is how auto notices that an answer has started copying, and how it
        # learns that a copy run continues beyond the few tokens it dared to draft.
        for kind, (key, tokens) in offers.items():
            self._shadows.setdefault(kind, _ShadowProposal(key, tokens))
        for kind, shadow in list(self._shadows.items()):
            if shadow.follow(produced):
                del self._shadows[kind]
                self.tracker(shadow.key).observe(len(shadow.tokens), shadow.matched)


class _ShadowProposal:
    """A lookup offer, scored against what the target produced, used or not."""

    def __init__(self, key: str, tokens: list[int]):
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
