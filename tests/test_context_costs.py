"""What a long context adds to a decode: priced by the CostModel, learned from real rounds, simulated alike.

Each verified token attends to every token before it, so on a CPU a batch of 32 tokens costs half as
much again after 1,000 tokens of context as after the calibration's 16, a single step a tenth more. The
calibration times every width at 16 tokens; the rate per verified token per token of context is learned
from rounds at long contexts (or measured apart: Speculator.measure_attention).
"""

import json

import pytest

from engine.bench import frozen_costs, round_seconds
from engine.config import ChatMessage, DrafterKind, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import RoundEvent
from engine.decoding.policy import ATTENTION_SPAN, Calibration, CostModel, FixedCosts
from engine.decoding.speculator import Speculator
from engine.decoding.stats import Round
from tests.test_drafters import GPU_COSTS, RuleTarget
from tests.test_engine import run

# Seconds as measured on an AVX-512 EPYC for the 1.5B starter target at a 16-token context.
EPYC = {1: 0.0343, 2: 0.0596, 4: 0.1033, 8: 0.2373, 16: 0.2687, 32: 0.4405}
ATTENTION = 6e-6  # seconds a verified token pays per token of context there


def test_a_decode_costs_its_widths_price_plus_what_each_token_attends_to():
    costs = CostModel(EPYC, attention_s=ATTENTION)
    assert costs.verify_s(32) == costs.verify_s(32, 16) == EPYC[32]  # at the calibration's context
    assert costs.verify_s(32, 1016) == pytest.approx(EPYC[32] + 32 * 1000 * ATTENTION)
    assert costs.verify_s(1, 1016) == pytest.approx(EPYC[1] + 1000 * ATTENTION)
    costs.context = 2016  # the round the speculator is about to draft for
    assert costs.verify_s(16) == pytest.approx(EPYC[16] + 16 * 2000 * ATTENTION)
    assert costs.step_s == pytest.approx(EPYC[1] + 2000 * ATTENTION)
    # A wide batch gets dearer against a step: 32 tokens were 12.8 steps at 16 tokens, 17 at 2,016.
    assert costs.verify_s(32) / costs.step_s > 1.3 * EPYC[32] / EPYC[1]


def test_the_rate_is_learned_from_rounds_at_long_contexts_against_the_calibration():
    costs = CostModel(EPYC)
    assert costs.attention_s == 0.0  # nothing known yet: priced as at the calibration's context
    costs.observe_verify(32, EPYC[32] + 32 * 3 * ATTENTION, context=19)  # 96 token pairs: noise, not attention
    assert costs.attention_s == 0.0
    for context, width in ((1016, 32), (1200, 16), (1400, 29)):
        assert width * (context - 16) >= ATTENTION_SPAN
        reference = EPYC[16] + (width - 16) * (EPYC[32] - EPYC[16]) / 16
        costs.observe_verify(width, reference + width * (context - 16) * ATTENTION, context)
    assert costs.attention_s == pytest.approx(ATTENTION)


def test_timings_at_different_contexts_are_compared_at_the_calibrations():
    """A width timed only at 1,000 tokens is not taken for dearer than one timed only at load."""
    costs = CostModel(EPYC, attention_s=ATTENTION)
    for _ in range(3):  # 16 tokens seen only in long rounds
        costs.observe_verify(16, EPYC[16] + 16 * 1000 * ATTENTION, context=1016)
    assert costs.verify_s(16, 16) == pytest.approx(EPYC[16])
    assert costs.verify_s(16, 1016) == pytest.approx(EPYC[16] + 16 * 1000 * ATTENTION)
    assert costs.verify_s(32, 1016) > costs.verify_s(16, 1016)


def test_padding_pays_for_the_extra_tokens_attention_and_stops_where_that_costs_more():
    steps = {1: 0.034, 8: 0.237, 15: 0.315, 16: 0.269, 32: 0.44}
    costs = CostModel(steps, pads=True, attention_s=ATTENTION)
    costs.context = 16
    assert costs.verify_width(15) == 16
    costs.context = 516
    assert costs.verify_width(15) == 16
    assert costs.verify_s(15) == pytest.approx(steps[16] + 16 * 500 * ATTENTION)
    costs.context = 100_016  # the padded token's attention now outweighs the tile's saving
    assert costs.verify_width(15) == 15
    assert costs.verify_s(15) == pytest.approx(steps[15] + 15 * 100_000 * ATTENTION)


def test_the_calibration_keeps_the_rate_and_a_frozen_simulation_prices_rounds_at_their_context():
    costs = CostModel(EPYC, attention_s=ATTENTION)
    costs.context = 3000  # the current context does not leak into the record
    calibration = costs.calibration()
    assert calibration.verify_s[32] == EPYC[32] and calibration.attention_s == ATTENTION
    assert calibration.calibrated_at == 16
    assert any("each token of context adds 6.0 µs" in line for line in calibration.describe())
    assert not any("context" in line for line in Calibration(EPYC).describe())
    frozen = frozen_costs(calibration)
    event = RoundEvent(Round(DrafterKind.LOOKUP, 15, 15, 15), 0.0, 0.4, 0.0, 0.5, 16, 1.0, context=1016)
    assert round_seconds(event, frozen) == pytest.approx(EPYC[16] + 16 * 1000 * ATTENTION)
    frozen.observe_verify(16, 10.0, 1016)  # a frozen machine learns nothing
    assert frozen.attention_s == ATTENTION and frozen.verify_s(16, 16) == EPYC[16]


def test_the_rate_learned_is_kept_in_autos_memory_and_outvoted_by_the_next_sessions_rounds():
    s = Speculator(RuleTarget(), costs=CostModel(EPYC))
    assert "context" not in s.memory()  # nothing learned, nothing kept
    s.costs.observe_verify(32, EPYC[32] + 32 * 1000 * ATTENTION, context=1016)
    memory = json.loads(json.dumps(s.memory()))
    assert memory["context"] == {"attention_s": pytest.approx(ATTENTION)}
    later = Speculator(RuleTarget(), costs=CostModel(EPYC))
    later.recall(memory)
    assert later.costs.attention_s == pytest.approx(ATTENTION)
    for _ in range(2):  # this machine is busier now: the new session's rounds decide
        later.costs.observe_verify(32, EPYC[32] + 32 * 1000 * 2 * ATTENTION, context=1016)
    assert later.costs.attention_s == pytest.approx(2 * ATTENTION)
    for damaged in ({"context": {"attention_s": "fast"}}, {"context": {"attention_s": -1.0}}, {"context": 3}, []):
        fresh = Speculator(RuleTarget(), costs=CostModel(EPYC))
        fresh.recall(damaged)
        assert fresh.costs.attention_s == 0.0


def test_every_round_is_priced_at_the_context_its_batch_attends_to():
    """The speculator sets the context before drafting, times the round at it, and reports it."""
    seen = []

    class Recording(FixedCosts):
        def observe_verify(self, n, seconds, context=None):
            seen.append((n, context, self.context))

    s = Speculator(RuleTarget(), costs=Recording(GPU_COSTS))
    prompt = [5, 6, 7, 8, 9, 10]
    events = [
        e
        for e in s.stream(prompt, SamplingParams(temperature=0.0, max_tokens=12), SpecParams(mode=DrafterMode.AUTO))
        if isinstance(e, RoundEvent)
    ]
    contexts = [len(prompt) - 1 + sum(e.n_tokens for e in events[:i]) for i in range(len(events))]
    assert [e.context for e in events] == contexts
    assert [c for _, c, _ in seen] == [now for _, _, now in seen] == contexts


def test_measuring_the_rate_leaves_the_target_answering_as_before(smollm2_path):
    """measure_attention times decodes after a long context and resets the cache: the next answer is plain's."""
    spec = ModelSpec(smollm2_path, n_ctx=1024)
    messages = [ChatMessage("user", "Name three colours.")]
    sampling = SamplingParams(temperature=0.0, max_tokens=16)

    def answer(engine: Engine) -> str:
        return run(engine, messages, sampling, SpecParams(mode=DrafterMode.OFF))[2].text

    engine = Engine(spec)
    try:
        before = answer(engine)
        engine.speculator.measure_attention(context_tokens=600)
        costs = engine.speculator.costs
        assert costs.attention_s >= 0.0 and costs.calibration().attention_s == costs.attention_s
        assert answer(engine) == before
    finally:
        engine.close()
