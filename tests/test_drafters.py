"""The Drafter interface without a model: a stand-in target whose next token is a fixed function of
the last, a drafter plugged into the loop as a new class, each drafter's own counters and trackers,
and the calibration record."""

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding.acceptance import Verdict
from engine.decoding.drafters import (
    NO_DRAFT,
    Draft,
    Drafter,
    HistoryDrafter,
    LookupDrafter,
    Offer,
    TrackerKey,
)
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent
from engine.decoding.policy import Calibration, Choice, CostModel, Option, best_choice
from engine.decoding.speculator import Speculator
from engine.history.store import Proposal

GREEDY = SamplingParams(temperature=0.0, max_tokens=40)
PROMPT = [1, 2, 3]
GPU_COSTS = {1: 0.010, 2: 0.0102, 4: 0.0105, 8: 0.011}


def follow(token: int) -> int:
    """The stand-in target's next token (never 0, its end-of-generation token)."""
    return (token * 5 + 1) % 31 + 1


class RuleTarget:
    """Enough of a ModelRunner for the Speculator: every row's argmax is follow(its token)."""

    n_ctx, n_batch, n_vocab = 512, 64, 32
    backend = "CPU"
    rollback_problem = None
    mtp = None
    memory = SimpleNamespace(needs_checkpoints=False)

    def __init__(self):
        self.cancel_event = None
        self.last_decoded = 0

    def eval(self, tokens, n_logits=1, checkpoint=None, width=0):
        self.last_decoded = len(tokens)
        if n_logits == 0:
            return None
        logits = np.zeros((n_logits, self.n_vocab), dtype=np.float32)
        for row, token in enumerate(tokens[len(tokens) - n_logits :]):
            logits[row, follow(token)] = 10.0
        return logits

    def is_eog(self, token: int) -> bool:
        return token == 0

    def piece(self, token: int) -> bytes:
        return f"t{token} ".encode()


class Oracle(Drafter):
    """A new drafter, written against the interface alone: it proposes the target's own next tokens."""

    kind = DrafterKind.DRAFT_MODEL
    source = TokenSource.DRAFT_MODEL
    modes = frozenset({DrafterMode.DRAFT_MODEL})

    def offer(self, context, k_cap, earlier):
        return Offer(self, TrackerKey(self.kind), k_cap)

    def draft(self, context, k, sampling, rng, p_min, joint=False):
        tokens = [follow(context[-1])]
        while len(tokens) < k:
            tokens.append(follow(tokens[-1]))
        return Draft(self.kind, k, tokens, [None] * k, source=self.source)

    def learn(self, draft, verdict):
        if draft.drafter == self.kind:
            self.tracker().observe(len(draft), verdict.n_accepted)


def speculator(*drafters: Drafter) -> Speculator:
    s = Speculator(RuleTarget(), costs=CostModel(GPU_COSTS))
    s.drafters += drafters
    return s


def answer(spec: Speculator, params: SpecParams, sampling=GREEDY) -> tuple[list, DoneEvent]:
    events = list(spec.stream(PROMPT, sampling, params))
    assert isinstance(events[-1], DoneEvent)
    return events[:-1], events[-1]


def test_a_drafter_plugged_in_as_a_new_class_is_accepted_in_full_and_lossless():
    oracle = Oracle()
    s = speculator(oracle)
    events, done = answer(s, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    _, plain = answer(speculator(), SpecParams(mode=DrafterMode.OFF))
    assert done.text == plain.text and done.stats.n_tokens == plain.stats.n_tokens == 40
    assert done.stats.n_drafted > 20 and done.stats.n_accepted == done.stats.n_drafted
    # Its own counters say the same as the answer's figures; lookup was not asked.
    assert (oracle.n_drafted, oracle.n_accepted) == (done.stats.n_drafted, done.stats.n_accepted)
    assert s.drafter(DrafterKind.LOOKUP).n_drafted == 0
    assert oracle.tracker().first_rate > 0.8  # from the prior 0.5, with a short memory
    # Each RoundEvent comes before its round's tokens, which carry the drafter's source.
    assert isinstance(events[0], RoundEvent)
    drafted = [e for e in events if isinstance(e, TokenEvent) and e.source == TokenSource.DRAFT_MODEL]
    assert len(drafted) == done.stats.n_accepted


def test_the_first_round_is_never_drafted_and_a_fixed_k_is_kept():
    _, done = answer(speculator(Oracle()), SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=3))
    first, *rest = done.stats.rounds
    assert first.drafter == DrafterKind.NONE and first.drafted == 0
    assert all(r.draft_length == 3 for r in rest[:-1])


class EndingTarget(RuleTarget):
    """A stand-in target that ends its answer (token 0) after token 25: 3 -> 17, 25, end."""

    def eval(self, tokens, n_logits=1, checkpoint=None, width=0):
        self.widths = [*getattr(self, "widths", []), n_logits]
        logits = super().eval(tokens, n_logits, checkpoint)
        for row, token in enumerate(tokens[len(tokens) - n_logits :] if n_logits else []):
            if token == 25:
                logits[row] = 0.0
                logits[row, 0] = 10.0
        return logits


class RunOnOracle(Oracle):
    """Drafts the ending target's tokens, and past its end as a draft model goes on after an end token."""

    def draft(self, context, k, sampling, rng, p_min, joint=False):
        tokens = []
        while len(tokens) < k:
            last = (tokens or context)[-1]
            tokens.append(0 if last == 25 else follow(last))
        return Draft(self.kind, k, tokens, [None] * k, source=self.source)


def test_nothing_after_a_drafted_end_token_is_verified():
    s = Speculator(EndingTarget(), costs=CostModel(GPU_COSTS))
    s.drafters.append(RunOnOracle())
    _, done = answer(s, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=8))
    assert done.text == "t17 t25 " and done.stats.n_tokens == 2
    # The second round drafted 25 and the end, not the 6 tokens after it: 3 rows verified, not 9.
    assert [(r.draft_length, r.drafted, r.accepted) for r in done.stats.rounds] == [(0, 0, 0), (8, 2, 2)]
    assert s.target.widths[-1] == 3


def test_a_mode_that_does_not_ask_a_drafter_leaves_it_out():
    oracle = Oracle()
    _, done = answer(speculator(oracle), SpecParams(mode=DrafterMode.LOOKUP, draft_length=4))
    assert oracle.n_drafted == 0 and DrafterKind.DRAFT_MODEL not in done.stats.by_drafter()


def test_lookup_offers_are_scored_against_what_the_target_produced_drafted_or_not():
    lookup = LookupDrafter()
    offer = lookup.offer([5, 6, 7, 8, 5, 6], 3, [])
    assert offer.key == TrackerKey(DrafterKind.LOOKUP, 2) and lookup.proposal == [7, 8, 5]
    for produced in (7, 8, 5):  # plain rounds that produced what it offered
        lookup.accept(NO_DRAFT, Verdict(0, produced))
    assert lookup.shadow is None and lookup.tracker(offer.key).first == [1.0, 0.0]
    assert lookup.tracker(offer.key).next[0] > 0 and lookup.n_drafted == 0


def test_auto_passes_over_a_lookup_match_that_went_on_several_ways_before():
    lookup = LookupDrafter()
    ambiguous = lookup.offer([5, 1, 5, 2, 5, 3, 5], 3, [])  # 5 went on with 1, 2 and 3
    assert ambiguous.support == pytest.approx((1 / 3,))
    unique = lookup.offer([5, 6, 7, 8, 5], 3, [])
    assert unique.support == (1.0,)
    # This project's 2-core Xeon: verifying 4 tokens costs 1.6 steps, so a guess must be a fair bet.
    costs = CostModel({1: 0.0706, 2: 0.0993, 4: 0.1117, 8: 0.2002})
    rates = (0.5, 0.7)
    taken = best_choice(costs, {DrafterKind.LOOKUP: Option(rates, 3, 0.0, support=unique.support)})
    assert taken.drafter == DrafterKind.LOOKUP
    passed = best_choice(costs, {DrafterKind.LOOKUP: Option(rates, 3, 0.0, support=ambiguous.support)})
    assert passed.drafter == DrafterKind.NONE
    # Above temperature 0 the discount cost more than it saved (README): the rates alone judge a match.
    lookup.begin(SpecParams(mode=DrafterMode.AUTO), greedy=False)
    assert lookup.offer([5, 1, 5, 2, 5, 3, 5], 3, []).support == ()


def test_lookup_drafts_a_tool_result_as_a_call_quotes_it_escaped():
    # The prompt holds a file as read (tokens 1..6 with 7 a newline); the call quotes it escaped (70 for \\n).
    file_as_read = [1, 2, 3, 7, 4, 5, 6]
    file_as_quoted = [1, 2, 3, 70, 4, 5, 6]
    lookup = LookupDrafter()
    context = [40, *file_as_read, 41, 42, 1, 2, 3, 70]  # the call has quoted past the escaped newline
    assert lookup.offer(context, 3, []) is None  # the prompt alone has nothing after an escaped newline
    lookup.use_quotes([file_as_quoted])
    offer = lookup.offer(context, 3, [])
    assert lookup.proposal == [4, 5, 6] and offer.match_length == 4
    lookup.use_quotes([])
    assert lookup.quotes is None


def test_history_is_offered_only_where_it_matches_further_back_than_lookup():
    class Index:
        match_length = 2

        def propose(self, context, k, min_match, min_share):
            return Proposal([9, 9, 9], self.match_length, 1, [1.0, 1.0, 1.0])

    index = Index()
    history = HistoryDrafter(index)
    lookup = LookupDrafter()
    context = [5, 6, 7, 8, 5, 6]
    from_lookup = lookup.offer(context, 4, [])
    assert from_lookup.match_length == 2
    assert history.offer(context, 4, [from_lookup]) is None  # as far back: the conversation wins
    index.match_length = 5
    assert history.offer(context, 4, [from_lookup]).key == TrackerKey(DrafterKind.HISTORY, 4)
    assert history.offer(context, 4, []) is not None


def test_tracker_keys_band_match_lengths_and_carry_their_priors():
    history = HistoryDrafter(None)
    assert [history.band(n) for n in (3, 4, 7, 8, 15, 16, 40)] == [3, 4, 4, 8, 8, 16, 16]
    assert [LookupDrafter().band(n) for n in (1, 2, 3, 4, 9, 32)] == [1, 2, 3, 4, 8, 16]
    assert history.tracker(TrackerKey(DrafterKind.HISTORY, 16)).rates == (0.8, 0.9)
    assert LookupDrafter().tracker(TrackerKey(DrafterKind.LOOKUP, 3)).rates == (0.5, 0.5)
    # A long match of the prompt (a quote) is as good a bet as one of the user's history.
    assert LookupDrafter().tracker(TrackerKey(DrafterKind.LOOKUP, 16)).rates == (0.8, 0.9)
    history.forget()
    assert history.trackers == {}


def test_forget_acceptance_and_drop_draft_model_reach_every_drafter():
    oracle = Oracle()
    s = speculator(oracle)
    answer(s, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    assert s.tracker(TrackerKey(DrafterKind.DRAFT_MODEL)) is oracle.tracker()
    s.forget_acceptance()
    assert oracle.trackers == {} and oracle.n_drafted == 0
    s.drop_draft_model()
    assert s.drafter(DrafterKind.DRAFT_MODEL) is None
    assert [d.kind for d in s.drafters] == [DrafterKind.DOCUMENTS, DrafterKind.LOOKUP]


def test_auto_scores_any_drafter_by_the_cost_it_states():
    costs = CostModel(GPU_COSTS)
    cheap = best_choice(costs, {DrafterKind.MTP: Option((0.9, 0.9), 8, 0.0005)})
    assert cheap.drafter == DrafterKind.MTP and cheap.draft_length >= 4
    dear = best_choice(costs, {DrafterKind.MTP: Option((0.9, 0.9), 8, 0.05)})
    assert dear.drafter == DrafterKind.NONE


def test_the_calibration_record_keeps_the_json_shape():
    costs = CostModel({1: 0.02, 2: 0.03}, draft_step_s=0.004)
    calibration = costs.calibration()
    assert calibration == Calibration({1: 0.02, 2: 0.03}, draft_step_s=0.004)
    assert calibration.step_s == 0.02
    assert json.loads(json.dumps(calibration.as_dict())) == {
        "verify_s": {"1": 0.02, "2": 0.03},
        "draft_step_s": 0.004,
        "draft_prefill_s": None,
        "mtp_step_s": None,
        "rollback_s": 0.0,
        "padded": {},
        "attention_s": 0.0,
        "calibrated_at": 16,
    }


def test_documents_draft_a_quote_before_lookup_and_only_for_the_answer_they_were_given():
    """The documents found for an answer are asked before lookup (a quote of a passage in the prompt
    is theirs at equal match length), draft a passage that is not in the prompt at all, stay lossless,
    and are gone after the answer."""
    s = speculator()
    documents = s.documents
    assert s.drafters[0] is documents and s.drafters[1].kind == DrafterKind.LOOKUP
    # The target's own continuation of the prompt, as a passage of the user's documents (not in the prompt).
    passage = [PROMPT[-1]]
    while len(passage) < 30:
        passage.append(follow(passage[-1]))
    documents.use([[7, 7, 7], passage])
    events, done = answer(s, SpecParams(mode=DrafterMode.LOOKUP))
    _, plain = answer(speculator(), SpecParams(mode=DrafterMode.OFF))
    assert done.text == plain.text
    from_documents = [e for e in events if isinstance(e, TokenEvent) and e.source == TokenSource.DOCUMENTS]
    assert len(from_documents) >= 20 and done.stats.by_drafter()[DrafterKind.DOCUMENTS].accepted >= 20

    # In the prompt as well: at equal match length the documents' offer comes first and lookup's is not made.
    context = [*passage[:10], 99, *passage[:3]]
    offered = documents.offer(context, 4, [])
    assert offered is not None and offered.match_length == 3 and documents.proposal == passage[3:7]
    assert s.drafters[1].offer(context, 4, [offered]) is None

    documents.use([])
    assert not documents.asked(SpecParams(), []) and documents.indexes == []
    _, alone = answer(s, SpecParams(mode=DrafterMode.LOOKUP))
    assert DrafterKind.DOCUMENTS not in alone.stats.by_drafter()


def test_auto_drafts_a_history_proposal_only_as_far_as_the_earlier_occurrences_agree():
    # An AVX-512 EPYC's shape: widths of 16 and more run a faster kernel, so a long sure draft pays.
    costs = CostModel({1: 0.040, 2: 0.065, 4: 0.125, 8: 0.31, 16: 0.38, 32: 0.59})
    rates = (0.95, 0.98)
    sure = best_choice(costs, {DrafterKind.HISTORY: Option(rates, 15, 0.0)})
    assert sure == Choice(DrafterKind.HISTORY, 15, sure.expected_tps)
    # Earlier loops went on two ways from the first token (another function's name): a coin flip.
    split = best_choice(costs, {DrafterKind.HISTORY: Option(rates, 15, 0.0, support=(0.5,) * 15)})
    assert split.drafter == DrafterKind.NONE
    # They agree for three tokens, then split: drafted up to the split.
    late = best_choice(costs, {DrafterKind.HISTORY: Option(rates, 15, 0.0, support=(1.0,) * 3 + (0.5,) * 12)})
    assert late.drafter == DrafterKind.HISTORY and late.draft_length <= 3


def test_the_calibration_says_what_a_token_costs_at_each_width():
    lines = Calibration({1: 0.04, 2: 0.064, 16: 0.384}, draft_step_s=0.02, draft_prefill_s=0.004).describe()
    assert lines == [
        "target step 40.0 ms",
        "verify  2 tokens   64.0 ms:  32.0 ms a token (0.80 of a step)",
        "verify 16 tokens  384.0 ms:  24.0 ms a token (0.60 of a step)",
        "draft-model step 20.0 ms (0.50 of a step)",
        "draft model catching up 4.00 ms a token of a new prompt",
    ]


class WideIsDearTarget(RuleTarget):
    """Decodes cost what they would on a CPU after a long prompt: a 5-token batch five times one token."""

    STEP_S = 0.01

    def eval(self, tokens, n_logits=1, checkpoint=None, width=0):
        if n_logits:
            time.sleep(self.STEP_S * n_logits)
        return super().eval(tokens, n_logits, checkpoint, width)


def test_the_estimate_prices_plain_decoding_no_dearer_than_the_answer_s_own_plain_steps():
    """The footer's estimate prices a drafted round's plain tokens by the batch/step ratio the CostModel
    believes. Here it believes a GPU's (5 tokens for 1.05 steps) while every token really costs a step, as a
    wide batch after a long prompt did on a CPU before the context's cost was learned: priced by that ratio
    alone, plain decoding looked about 4.5 times dearer than its own steps and the answer said 4.4x for 1x."""
    from engine.decoding.policy import FixedCosts

    s = Speculator(WideIsDearTarget(), costs=FixedCosts(GPU_COSTS))
    s.drafters.append(Oracle())
    _, done = answer(s, SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4))
    assert done.stats.n_accepted == done.stats.n_drafted > 20  # every draft accepted: 5 tokens a round
    # Plain decoding of these 40 tokens takes 40 steps; each drafted round took 5. The estimate says about 1x
    # (what the answer's plain steps cost beyond their decode shifts it a little), not 4.4x.
    assert 0.7 < done.stats.estimated_speedup < 1.5
