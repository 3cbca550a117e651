"""The streaming loop: draft, verify in one batch, accept, emit; repeat.

Each round keeps the last committed token apart and verifies [last, d1..dk] in one target
decode (llama.cpp's speculative-simple layout), so a round with nothing drafted is exactly a
plain decoding step. The runners' prefix-matching eval keeps both KV caches consistent on every
path out of the loop: finished, stopped, cancelled or failed.

Two layers, as in mlx-lm: the token generator (_rounds) yields per round the committed tokens and
what the round cost; stream turns them into text, TokenEvents, RoundEvents and the DoneEvent.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.chat.reasoning import PieceSplitter, ReasoningSplitter
from engine.chat.textstream import TextStream
from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.acceptance import Verdict, verify_greedy, verify_sampled
from engine.decoding.auto_memory import CONTEXT_MEMORY
from engine.decoding.drafters import (
    NO_DRAFT,
    DocumentDrafter,
    Draft,
    Drafter,
    DraftModelDrafter,
    HistoryDrafter,
    LookupDrafter,
    MtpDrafter,
    Offer,
    TrackerKey,
)
from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, TokenEvent
from engine.decoding.policy import AcceptanceTracker, Choice, CostModel, Option, best_choice
from engine.decoding.sampling import Distribution, Draws, distribution, make_rng
from engine.decoding.stats import AnswerStats, Round
from engine.decoding.tool_grammar import GrammarTrack
from engine.errors import ContextFullError, EngineError
from engine.history.store import HistoryIndex
from engine.llama.memory import CheckpointKind
from engine.llama.runner import CALIBRATION_CONTEXT, Cancelled, ModelRunner

# Widths timed at load. Wide ones matter: on some CPUs a batch of 16 or more runs a faster matrix kernel
# (an AVX-512 EPYC verifies 32 tokens at under half the per-token cost of 8), which a line through the
# narrow widths would never reveal. They are timed once each (they take longest; real rounds refine them).
CALIBRATION_SIZES = (1, 2, 4, 8)
WIDE_CALIBRATION_SIZES = (16, 32)
# What context adds to a decode is learned from real rounds (and kept in auto's memory); measure_attention
# times it after this many tokens.
ATTENTION_CONTEXT = 512
DRAFT_PREFILL_SIZE = 16  # the draft model's per-token cost of catching up, until a real catch-up is timed
RECENT_PLAIN_STEPS = 15  # an answer's last plain steps, whose median caps what a drafted round says plain costs
# Probes: a drafter that learns only by drafting (a model) is tried by auto, at the length that
# would pay were its tokens mostly accepted (PROBE_RATES), while it has been judged on fewer than
# PROBE_SEEN rounds (at most one probe in PROBE_GAP rounds), and again after REPROBE_ROUNDS rounds
# unused. A drafter that could not pay even then is never probed: on a CPU where a draft model
# cannot beat plain decoding, exploring it costs nothing.
PROBE_RATES = (0.9, 0.9)
PROBE_SEEN = 3
PROBE_GAP = 8
REPROBE_ROUNDS = 64
# A probe again of a drafter already judged may cost at most this share of the answer so far (and of the
# time since it was last used): on a CPU a draft model catching up on a new prompt costs a second or more,
# a third of a short answer, so it is probed again only well into a long one.
EXPLORATION = 0.05


@dataclass(frozen=True)
class RoundTokens:
    """One verification round as the token generator made it: the tokens the answer kept with where
    each came from, the round, and what it cost (RoundEvent's figures, less the running gen_s)."""

    round: Round
    tokens: list[int]
    sources: list[TokenSource]
    t_draft: float
    t_verify: float  # undoing a rejected tail included
    t_sample: float
    plain_s: float  # plain decoding's steps for these tokens (and an end-of-generation one): their decodes alone
    finish: FinishReason | None  # set on the round that ended the answer
    n_priced: int = 1  # the tokens plain_s prices
    t_choose: float = 0.0  # asking the drafters and choosing, drafting included: what plain decoding never pays
    draft_steps: int = 0  # a model drafter's decode steps: its tokens, and the one it was too unsure to take
    caught_up: int = 0  # context tokens a draft model evaluated before drafting (a new prompt, a tool result)
    context: int = 0  # tokens in the target's cache before the round's batch: what its tokens attended to


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
        # Asked in this order every round: the documents found for the answer (empty unless some were),
        # the current conversation's lookup, then the user's history.
        self.documents = DocumentDrafter()
        self.lookup = LookupDrafter()
        self.drafters: list[Drafter] = [self.documents, self.lookup]
        if history is not None:
            self.drafters.append(HistoryDrafter(history))
        if self.draft_runner is not None:
            self.drafters.append(DraftModelDrafter(self.draft_runner))
        if target.mtp is not None:
            self.drafters.append(MtpDrafter(target.mtp))
        self.last_answer: list[int] = []  # the tokens of the latest answer, for the history index
        self.costs = costs or self.calibrate()
        self.rounds_since_probe = PROBE_GAP
        self.answer_rounds = 0  # rounds of the answer being written, before this one

    def calibrate(self) -> CostModel:
        """Time target decodes of a few widths and one draft step (about 3 s on 2 CPU cores)."""
        verify = self.target.time_decodes(CALIBRATION_SIZES) | self.target.time_decodes(WIDE_CALIBRATION_SIZES, 1)
        draft = self.draft_runner.time_decodes([1, DRAFT_PREFILL_SIZE]) if self.draft_runner else {}
        draft_prefill = draft[DRAFT_PREFILL_SIZE] / DRAFT_PREFILL_SIZE if draft else None
        rollback = self.target.time_rollback() if self._rolls_back else 0.0
        mtp_step = self.target.time_mtp_step() if self.target.mtp is not None else None
        return CostModel(
            verify,
            draft.get(1),
            rollback,
            mtp_step,
            draft_prefill,
            self.target.can_pad,
            calibrated_at=CALIBRATION_CONTEXT,
        )

    def measure_attention(self, context_tokens: int = ATTENTION_CONTEXT) -> None:
        """Time the wide widths after a long context, so that the costs know what context adds before real
        rounds teach them (CostModel.attention_s). Seconds on a CPU: for the benchmarks and `engine info --costs`,
        not for every load."""
        context_tokens = min(context_tokens, self.target.n_ctx - max(WIDE_CALIBRATION_SIZES) - 1)
        if context_tokens < 2 * CALIBRATION_CONTEXT:  # a context too small to tell
            return
        # Timed again beside the long ones (like with like), three times each: a busy moment moves one timing a lot.
        short = self.target.time_decodes(WIDE_CALIBRATION_SIZES, 3)
        long = self.target.time_decodes(WIDE_CALIBRATION_SIZES, 3, context_tokens)
        for n in WIDE_CALIBRATION_SIZES:
            self.costs.observe_attention((long[n] - short[n]) / (n * (context_tokens - CALIBRATION_CONTEXT)))

    @property
    def _rolls_back(self) -> bool:
        """Rejected drafts go back to a checkpoint (a recurrent memory), not by erasing in place."""
        return self.target.memory.needs_checkpoints

    @property
    def no_speculation_reason(self) -> str:
        """Why this target is decoded plainly whatever the settings say ("" when it can speculate)."""
        problem = self.target.rollback_problem
        return f"speculation off: {problem}, so a rejected draft could not be undone" if problem else ""

    def drafter(self, kind: DrafterKind) -> Drafter | None:
        return next((d for d in self.drafters if d.kind == kind), None)

    def tracker(self, key: TrackerKey) -> AcceptanceTracker:
        """The acceptance record auto scores key's offers by (its drafter must be here)."""
        return self.drafter(key.kind).tracker(key)

    def drop_draft_model(self) -> None:
        """Draft without the draft model from now on (it is being freed)."""
        self.draft_runner = None
        self.drafters = [d for d in self.drafters if d.kind != DrafterKind.DRAFT_MODEL]

    def forget_acceptance(self) -> None:
        """Back to the priors: what auto learned of every drafter, and when it last probed."""
        for drafter in self.drafters:
            drafter.forget()
        self.rounds_since_probe = PROBE_GAP

    def memory(self) -> dict[str, dict]:
        """What auto has learned of each drafter's acceptance, and of what a token of context adds to a decode,
        as JSON (engine.decoding.auto_memory keeps it)."""
        memory = {d.kind.value: d.memory() for d in self.drafters if d.trackers}
        if self.costs.attention_s:
            memory[CONTEXT_MEMORY] = {"attention_s": self.costs.attention_s}
        return memory

    def recall(self, memory: dict) -> None:
        """Take memory() from an earlier session with the same models; unknown drafters are skipped."""
        if not isinstance(memory, dict):
            return
        for drafter in self.drafters:
            if drafter.kind.value in memory:
                drafter.recall(memory[drafter.kind.value])
        if isinstance(memory.get(CONTEXT_MEMORY), dict):
            self.costs.recall_attention(memory[CONTEXT_MEMORY].get("attention_s"))

    # -- one answer: the text layer ----------------------------------------------------------

    def stream(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        spec: SpecParams,
        cancel: threading.Event | None = None,
        stats: AnswerStats | None = None,
        t_request: float | None = None,
        reasoning: PieceSplitter | None = None,
        shown_as: Mapping[int, bytes] | None = None,
        grammar: GrammarTrack | None = None,
    ) -> Iterator[Event]:
        """Stream the answer to prompt (token ids): per verification round a RoundEvent, then that
        round's TokenEvents; one DoneEvent last. reasoning, when given, splits a thinking block off
        the answer. shown_as: text for control tokens that otherwise show nothing (a tool-call
        marker such as Mistral's [TOOL_CALLS], which the tool-call parser must see). grammar: constrain
        each verified position with it (engine/decoding/tool_grammar.py), losslessly."""
        t_start = t_request or time.perf_counter()
        stats = stats or AnswerStats()
        stats.backend = self.target.backend
        if self.no_speculation_reason:
            spec = spec.with_(mode=DrafterMode.OFF)
            stats.plain_reason = self.no_speculation_reason
        runners = [r for r in (self.target, self.draft_runner) if r is not None]
        for r in runners:
            r.cancel_event = cancel
        text = TextStream(sampling.stop)
        split = reasoning or ReasoningSplitter(thinking=False)
        answer: list[str] = []
        shown: list[TokenEvent] = []  # the round's text, held until its RoundEvent has gone out
        sources: Counter = Counter()
        self.last_answer = []
        finish, error = None, None
        t_gen = time.perf_counter()

        def show(token: int, source: TokenSource) -> bool:
            """The text layer takes a committed token; False once a stop string has ended the answer."""
            sources[source.value] += 1
            data = shown_as.get(token) if shown_as else None
            for part in split.push_all(text.push(token, data or self.target.piece(token), source)):
                if not stats.ttft_s:
                    stats.ttft_s = time.perf_counter() - t_start
                if split.entered and not stats.reasoning_s and not part.reasoning:
                    stats.reasoning_s = time.perf_counter() - t_gen
                if not part.reasoning:
                    answer.append(part.piece.text)
                shown.append(TokenEvent(part.piece.token, part.piece.text, part.piece.source, part.reasoning))
            return not text.stopped

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
            t_resumed = t_gen  # when the reader of the events last handed back
            for verified in self._rounds(prompt, sampling, spec, cancel, show, grammar):
                t_round = time.perf_counter()
                event = RoundEvent(
                    verified.round,
                    t_draft=verified.t_draft,
                    t_verify=verified.t_verify,
                    t_sample=verified.t_sample,
                    plain_s=verified.plain_s + verified.n_priced * self.costs.plain_overhead_s,
                    n_tokens=len(verified.tokens),
                    gen_s=t_round - t_gen,
                    draft_steps=verified.draft_steps,
                    caught_up=verified.caught_up,
                    context=verified.context,
                )
                event.apply_to(stats)
                yield event
                yield from shown
                shown.clear()
                finish = verified.finish
                t_before, t_resumed = t_resumed, time.perf_counter()
                if not verified.round.drafted:  # a plain step: what it cost beyond its decode, its reading too
                    self.costs.observe_plain_overhead(t_resumed - t_before - verified.t_choose - verified.t_verify)
            finish = finish or FinishReason.CONTEXT  # the rounds stopped for want of room
        except Cancelled:
            finish = FinishReason.CANCELLED
        except ContextFullError as e:
            finish, error = FinishReason.CONTEXT, e.user_message()
        except EngineError as e:
            finish, error = FinishReason.ERROR, e.user_message()
        finally:
            for r in runners:
                r.cancel_event = None
        for part in split.push_all(text.finish(), final=True):
            answer += [] if part.reasoning else [part.piece.text]
            yield TokenEvent(part.piece.token, part.piece.text, part.piece.source, part.reasoning)
        # gen_s stays where the last round's event put it: the live figures end on the same one.
        stats.n_reasoning_tokens = split.n_reasoning_tokens
        if grammar is not None:
            stats.grammar_s, stats.n_grammar_rows = grammar.seconds, grammar.n_rows
        if split.entered and not stats.reasoning_s:
            stats.reasoning_s = stats.gen_s  # it never stopped thinking
        stats.target_step_s = self.costs.step_s  # after this answer's own plain steps updated it
        stats.count_sources(sources)
        yield DoneEvent(finish, stats, "".join(answer), error, split.reasoning.strip())

    # -- one answer: the token generator -----------------------------------------------------

    def _rounds(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        spec: SpecParams,
        cancel: threading.Event | None,
        show: Callable[[int, TokenSource], bool],
        grammar: GrammarTrack | None = None,
    ) -> Iterator[RoundTokens]:
        """Draft, verify in one batch, accept; per round the tokens committed. All of the prompt but its
        last token is in the target's cache already. show(token, source) hands each committed token to the
        text layer, which says whether the answer goes on (a stop string ends it). Ends after the round
        that finishes the answer, or when the context has no room for another."""
        rng, draws = make_rng(sampling.seed), Draws(sampling.seed)
        for drafter in self.drafters:
            drafter.begin(spec, sampling.greedy)
        committed = list(prompt)
        plain_steps: list[float] = []  # this answer's plain rounds' decodes (what plain decoding pays here, now)
        for n_round in itertools.count():
            self.answer_rounds = n_round
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            room = self.target.n_ctx - len(committed)
            if room <= 0:
                return
            n_answer = len(committed) - len(prompt)
            k_cap = min(spec.max_draft_length, room - 1, sampling.max_tokens - n_answer - 1, self.target.n_batch - 1)
            if n_round == 0:
                k_cap = 0  # the first token is never held back by a draft's verification
            t_choose = time.perf_counter()
            context = self.costs.context = len(committed) - 1  # what this round's batch attends to
            draft = self._draft(committed, k_cap, sampling, spec, rng, sampling.max_tokens - n_answer)
            t0 = time.perf_counter()
            speculative = CheckpointKind.ROUND if draft.tokens and self._rolls_back else None
            width = self.costs.verify_width(len(draft) + 1)  # wider where that costs less (CostModel.pads)
            logits = self.target.eval(committed + draft.tokens, len(draft) + 1, checkpoint=speculative, width=width)
            t1 = time.perf_counter()
            if grammar is not None:  # each position as constrained plain decoding would see it
                logits = grammar.constrain(
                    logits, draft.tokens, sampling.greedy, self.target.is_eog, sampling.top_k, sampling.min_p
                )
            verdict = self._verify(logits, draft, sampling, rng, draws, len(committed))
            if grammar is not None:
                grammar.commit(verdict.n_accepted, verdict.next_token, self.target.is_eog)
            t2 = time.perf_counter()
            self.costs.observe_verify(width, t1 - t0, context)
            # Plain decoding pays one single-token step per token: priced from this round's own
            # timing, so a machine busier now than at calibration does not inflate the estimate. That
            # prices it by the batch/step ratio the CostModel believes, which after a long prompt (passages,
            # tool results) can be the calibration's while a wide batch has grown dearer than a step (it
            # attends to the context 16 times over): the answer's own recent plain steps, timed at this
            # context, cap it. The first round is always one.
            plain_step = (t1 - t0) * self.costs.verify_s(1) / self.costs.verify_s(len(draft) + 1)
            if draft.tokens:
                plain_step = min(plain_step, statistics.median(plain_steps[-RECENT_PLAIN_STEPS:]))
            else:
                plain_steps.append(t1 - t0)
            for drafter in self.drafters:
                drafter.accept(draft, verdict)
            new = draft.tokens[: verdict.n_accepted] + [verdict.next_token]
            origin = [draft.source] * verdict.n_accepted + [TokenSource.TARGET]
            tokens: list[int] = []
            sources: list[TokenSource] = []
            finish, n_priced = None, 0
            for token, source in zip(new, origin, strict=True):
                n_priced += 1  # plain decoding pays a step for every token, the one that ends the answer too
                if self.target.is_eog(token):
                    finish = FinishReason.STOP
                    break
                committed.append(token)
                self.last_answer.append(token)
                tokens.append(token)
                sources.append(source)
                if not show(token, source):
                    finish = FinishReason.STOP
                    break
                if n_answer + len(tokens) >= sampling.max_tokens:
                    finish = FinishReason.LENGTH
                    break
            t_rollback = 0.0
            if speculative and verdict.n_accepted < len(draft) and finish is None:
                # The rejected tail is undone now, from the checkpoint, so the round pays for it.
                t3 = time.perf_counter()
                self.target.eval(committed[:-1], 0)
                t_rollback = time.perf_counter() - t3
                self.costs.observe_rollback(t_rollback)
            yield RoundTokens(
                Round(draft.drafter, draft.draft_length, len(draft), verdict.n_accepted),
                tokens,
                sources,
                t_draft=draft.seconds,
                t_verify=t1 - t0 + t_rollback,
                t_sample=t2 - t1,
                plain_s=plain_step * n_priced,
                finish=finish,
                n_priced=n_priced,
                t_choose=t0 - t_choose,
                draft_steps=draft.n_steps,
                caught_up=draft.caught_up,
                context=context,
            )
            if finish is not None:
                return

    def _draft(
        self, committed: list[int], k_cap: int, sampling: SamplingParams, spec: SpecParams, rng, horizon: int
    ) -> Draft:
        """This round's draft: each drafter the settings ask offers what it can, auto (or the user's
        choice) picks one and a length, and that drafter drafts. horizon: tokens the answer may still write."""
        if k_cap < 1 or spec.mode == DrafterMode.OFF:
            return NO_DRAFT
        offers: list[Offer] = []
        for drafter in self.drafters:
            offer = drafter.offer(committed, k_cap, offers) if drafter.asked(spec, offers) else None
            if offer is not None:
                offers.append(offer)
        if not offers:
            return NO_DRAFT
        # A greedy model drafter stops where the chance that all its tokens so far match the target
        # (the product of its top probabilities) falls below the break-even point, its adaptive p_min:
        # a long run where it is sure, a short one where it is not; its average rates would cut every
        # run to one length. Above temperature 0 the top probability says little about accepting a
        # sampled token, so the rates choose the length and the floor applies to each token. Rounds it
        # ends itself are priced by what such rounds were, not by rates at a k it does not keep to.
        joint = sampling.greedy and spec.draft_p_min is None
        self_ended = joint and spec.draft_length is None
        options = {
            o.drafter.kind: Option(
                o.drafter.tracker(o.key).rates,
                o.k_max if spec.draft_length is None else min(spec.draft_length, o.k_max),
                o.drafter.step_s(self.costs),
                o.drafter.catch_up_cost(self.costs, o.behind),
                o.support,
                o.drafter.measured_rounds(self.costs) if self_ended else None,
            )
            for o in offers
        }
        choice = best_choice(
            self.costs,
            options,
            allow_none=spec.mode == DrafterMode.AUTO,
            fixed_k=spec.draft_length is not None,
            horizon=horizon,
        )
        probe = None
        if spec.mode == DrafterMode.AUTO and spec.draft_length is None:
            probe = self._probe(offers, options, choice, horizon)
        choice = probe or choice
        chosen = next((o.drafter for o in offers if o.drafter.kind == choice.drafter), None)
        if chosen is None:
            return NO_DRAFT
        length, rate = choice.draft_length, choice.expected_tps
        if self_ended and chosen.stops_when_unsure:
            length = options[chosen.kind].k_max
            if probe is None:
                # Its floor values time at the rate its rates promise, as before its rounds priced the choice:
                # the floor was tuned so on simulated GPU costs, where the two rates differ and the runs with them.
                rated = replace(options[chosen.kind], measured=None)
                rate = best_choice(self.costs, {chosen.kind: rated}, allow_none=False, horizon=horizon).expected_tps
        p_min = (
            spec.draft_p_min
            if spec.draft_p_min is not None
            else chosen.confidence_floor(self.costs, length, joint, rate)
        )
        try:
            draft = chosen.draft(committed, length, sampling, rng, p_min, joint)
        except ContextFullError:  # the draft's context is smaller than the target's: go on without it
            return NO_DRAFT
        draft.end_at(self.target.is_eog)
        chosen.observe_cost(self.costs, draft)
        if spec.sample_and_match:
            draft.p_draft = [None] * len(draft)  # a point mass: accepted iff the target samples it
        return draft

    def _probe(self, offers: list[Offer], options: dict, choice: Choice, horizon: int) -> Choice | None:
        """This round as a probe of a drafter auto knows too little about (see PROBE_RATES), or None."""
        self.rounds_since_probe += 1
        if self.rounds_since_probe < PROBE_GAP:
            return None
        for offer in offers:
            drafter = offer.drafter
            tracker = drafter.tracker(offer.key)
            if not drafter.needs_probes or drafter.kind == choice.drafter:
                continue
            if tracker.seen >= PROBE_SEEN and drafter.rounds_unused < REPROBE_ROUNDS:
                continue
            hopeful_option = replace(options[drafter.kind], rates=PROBE_RATES, measured=None)
            hopeful = best_choice(self.costs, {drafter.kind: hopeful_option}, horizon=horizon)
            if hopeful.drafter != drafter.kind:
                continue
            if tracker.seen >= PROBE_SEEN and self._probe_cost(hopeful_option, hopeful) > EXPLORATION * (
                min(drafter.rounds_unused, self.answer_rounds) * self.costs.step_s
            ):
                continue
            self.rounds_since_probe = 0
            return hopeful
        return None

    def _probe_cost(self, option: Option, choice: Choice) -> float:
        """What a probe costs beyond a plain step, were all its drafts rejected: its catch-up and one round."""
        k = choice.draft_length
        return option.catch_up_s + k * option.step_s + self.costs.verify_s(k + 1) - self.costs.step_s

    @staticmethod
    def _verify(logits: np.ndarray, draft: Draft, sampling: SamplingParams, rng, draws: Draws, first: int) -> Verdict:
        """first: the position of the round's first new token, so row i draws with the key of position first + i."""
        if sampling.greedy:
            return verify_greedy(np.argmax(logits, axis=1).tolist(), draft.tokens)
        rows = _TargetRows(logits, sampling)
        return verify_sampled(rows, draft.tokens, draft.p_draft, rng, lambda i: draws.at(first + i))
