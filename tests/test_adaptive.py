"""Auto mode and cache reuse on real models: behaviour under given costs, never wall-clock."""

from engine.config import ChatMessage, DrafterKind, DrafterMode, SamplingParams, SpecParams
from engine.decoding.events import DoneEvent
from engine.decoding.policy import CostModel, FixedCosts

GREEDY = SamplingParams(temperature=0.0, max_tokens=40)

COPY_TASK = [
    ChatMessage(
        "user",
        "Repeat this list exactly, one item per line, and nothing else:\n"
        "apples\nbananas\ncherries\ndates\nelderberries\nfigs\ngrapes\nhoneydew melons\nkiwis\nlemons\n",
    )
]


def answer(engine, messages, spec=SpecParams(), sampling=GREEDY) -> DoneEvent:
    return [e for e in engine.chat(messages, sampling, spec) if isinstance(e, DoneEvent)][0]


def with_costs(engine, costs: CostModel):
    saved = engine.speculator.costs
    engine.speculator.costs = costs
    engine.speculator.forget_acceptance()
    return saved


def test_auto_drafts_nothing_where_verification_costs_as_much_as_single_steps(small_engine):
    saved = with_costs(small_engine, FixedCosts({1: 0.01, 2: 0.02, 4: 0.04, 8: 0.08}, draft_step_s=0.006))
    try:
        done = answer(small_engine, COPY_TASK)
    finally:
        small_engine.speculator.costs = saved
    assert done.stats.n_drafted == 0
    assert {r.drafter for r in done.stats.rounds} == {DrafterKind.NONE}


def test_auto_switches_to_lookup_when_the_answer_copies_the_prompt(small_engine):
    # The starter pair's measured shape on a 2-core CPU: one more verified token costs about half a step.
    saved = with_costs(small_engine, FixedCosts({1: 0.027, 2: 0.040, 4: 0.070, 8: 0.122}, draft_step_s=0.016))
    try:
        done = answer(small_engine, COPY_TASK, sampling=GREEDY.with_(max_tokens=60))
        plain = answer(small_engine, COPY_TASK, SpecParams(mode=DrafterMode.OFF), GREEDY.with_(max_tokens=60))
    finally:
        small_engine.speculator.costs = saved
    drafters = [r.drafter for r in done.stats.rounds]
    # The draft model cannot pay at these costs.
    assert DrafterKind.LOOKUP in drafters and DrafterKind.DRAFT_MODEL not in drafters
    assert done.stats.tokens_by_source.get("lookup", 0) >= 10
    assert done.text == plain.text  # greedy speculation is lossless


def test_auto_uses_a_cheap_draft_model_on_a_fast_accelerator(small_engine):
    assert_auto_drafts_with_the_draft_model_at_gpu_costs(small_engine)


def assert_auto_drafts_with_the_draft_model_at_gpu_costs(engine, sampling=GREEDY):
    """A GPU verifies 8 tokens in about the time of one: drafting with the draft model must pay.
    (tests/test_vulkan.py runs this on a real GPU backend too.)"""
    saved = with_costs(engine, FixedCosts({1: 0.010, 2: 0.0102, 4: 0.0105, 8: 0.011}, draft_step_s=0.001))
    try:
        done = answer(engine, [ChatMessage("user", "Tell me about the ocean.")], sampling=sampling)
    finally:
        engine.speculator.costs = saved
    assert done.stats.n_drafted > 0
    assert any(r.drafter == DrafterKind.DRAFT_MODEL and r.draft_length >= 2 for r in done.stats.rounds)


def test_editing_an_earlier_message_reuses_the_common_prefix(small_engine):
    first = [ChatMessage("system", "You are terse."), ChatMessage("user", "Name a colour.")]
    a = answer(small_engine, first)
    convo = [*first, ChatMessage("assistant", a.text), ChatMessage("user", "Name an animal.")]
    answer(small_engine, convo)
    edited = [*convo[:3], ChatMessage("user", "Name a fruit.")]
    done = answer(small_engine, edited)
    assert 0 < done.stats.n_prompt_evaluated < done.stats.n_prompt_tokens / 2


def test_switching_conversations_does_not_mix_caches(small_engine):
    convo_a = [ChatMessage("user", "Write one sentence about trains.")]
    convo_b = [ChatMessage("user", "Write one sentence about rivers.")]
    small_engine.reset_cache()
    fresh_a = answer(small_engine, convo_a).text
    small_engine.reset_cache()
    fresh_b = answer(small_engine, convo_b).text
    assert answer(small_engine, convo_a).text == fresh_a
    assert answer(small_engine, convo_b).text == fresh_b
    assert answer(small_engine, convo_a).text == fresh_a


def test_calibration_measures_every_width_and_leaves_the_caches_empty(small_engine):
    costs = small_engine.speculator.calibrate()
    widths = costs.calibration().verify_s
    assert set(widths) == {1, 2, 4, 8, 16, 32} and all(t > 0 for t in widths.values())
    assert costs.verify_s(32) >= costs.verify_s(8) >= costs.verify_s(1) and costs.draft_step_s > 0
    assert costs.draft_prefill_s > 0  # per token of a catch-up, so a draft model behind a new prompt is priced
    assert small_engine.target.cached == [] and small_engine.draft.cached == []


def test_a_draft_model_behind_the_conversation_catches_up_apart_from_its_steps(small_engine):
    """The catch-up is what auto prices per token (CostModel.draft_prefill_s), not a slow draft step."""
    from engine.decoding.drafters import CATCH_UP_TIMED
    from engine.decoding.sampling import make_rng

    drafter = small_engine.speculator.drafter(DrafterKind.DRAFT_MODEL)
    small_engine.draft.reset()
    context = small_engine.target.tokenize(COPY_TASK[0].content)
    assert len(context) > CATCH_UP_TIMED and drafter.behind(context) == len(context) - 1
    costs = CostModel({1: 0.01})
    draft = drafter.draft(context, 3, GREEDY, make_rng(0), p_min=0.0)
    drafter.observe_cost(costs, draft)
    assert draft.caught_up == len(context) - 1 and 0 < draft.catch_up_s < draft.seconds
    assert costs.draft_prefill_s == draft.catch_up_s / draft.caught_up
    assert costs.draft_step_s == (draft.seconds - draft.catch_up_s) / draft.n_steps
    assert drafter.behind(context + draft.tokens) == 0  # it keeps up from here: the next draft catches up nothing
    small_engine.draft.reset()


def test_engine_info_prints_what_auto_believes_each_width_costs(smollm2_path):
    from tests.test_context_notes import cli

    done = cli("info", "--model", smollm2_path, "--draft", smollm2_path, "--ctx", "1024", "--costs")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "auto's costs: target step" in done.stdout
    for n in (2, 4, 8, 16, 32):
        assert f"verify {n:>2} tokens" in done.stdout
    assert "draft-model step" in done.stdout and "draft model catching up" in done.stdout
