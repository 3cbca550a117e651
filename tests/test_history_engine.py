"""History drafting through the real engine: what an earlier conversation taught auto is drafted
when the user repeats themselves, losslessly; it persists across restarts, a deleted conversation
can no longer be drafted, and a model with another vocabulary never sees it."""

import pytest

from engine.config import ChatMessage, DrafterKind, DrafterMode, ModelSpec, SamplingParams, SpecParams, TokenSource
from engine.decoding.chat_engine import Engine
from engine.decoding.drafters import TrackerKey
from engine.decoding.events import DoneEvent
from engine.decoding.policy import FixedCosts
from tests.pinned_costs import CPU_COSTS  # auto's choices here: not the machine's load

QUESTION = "Write a Python function that checks whether a number is prime, with a docstring."
GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
AUTO = SpecParams(mode=DrafterMode.AUTO)


def steady(engine: Engine) -> Engine:
    engine.speculator.costs = FixedCosts(CPU_COSTS)
    return engine


def answer(engine, question=QUESTION, spec=AUTO, sampling=GREEDY, remember=None) -> DoneEvent:
    engine.reset_cache()  # each answer starts cold, as a new chat would
    events = list(engine.chat([ChatMessage("user", question)], sampling, spec, remember=remember))
    return events[-1]


def history_rounds(done: DoneEvent) -> int:
    tally = done.stats.by_drafter().get(DrafterKind.HISTORY)
    return tally.rounds if tally else 0


@pytest.fixture
def engine_with_history(smollm2_path, tmp_path):
    engine = steady(Engine(ModelSpec(smollm2_path, n_ctx=2048), history_dir=tmp_path / "history"))
    yield engine
    engine.close()


def test_a_repeated_question_is_drafted_from_history_and_stays_lossless(engine_with_history):
    engine = engine_with_history
    plain = answer(engine, spec=SpecParams(mode=DrafterMode.OFF))
    first = answer(engine, remember=1)
    assert history_rounds(first) == 0  # nothing to remember yet
    assert engine.history.conversations() == {1}
    again = answer(engine, remember=2)
    assert history_rounds(again) > 0
    assert again.stats.tokens_by_source.get(TokenSource.HISTORY.value, 0) > 20
    assert again.text == plain.text == first.text  # greedy: drafts change the speed, never the text
    without = answer(engine, spec=AUTO.with_(history=False))
    assert history_rounds(without) == 0 and without.text == plain.text


def test_history_drafts_are_a_point_mass_above_temperature_zero(engine_with_history):
    """Above 0 a history draft goes through the rejection rule as a deterministic proposal
    (p_draft None: accepted with the target's own probability), like prompt lookup."""
    engine = engine_with_history
    answer(engine, remember=1)
    engine.reset_cache()
    speculator = engine.speculator
    for band in (3, 4, 8, 16):  # as if history had paid off lately: auto takes its offers
        speculator.tracker(TrackerKey(DrafterKind.HISTORY, band)).first = [50.0, 0.0]
        speculator.tracker(TrackerKey(DrafterKind.HISTORY, band)).next = [50.0, 0.0]
    drafts = []
    original = speculator._draft

    def spy(*args, **kwargs):
        draft = original(*args, **kwargs)
        drafts.append(draft)
        return draft

    speculator._draft = spy
    try:
        sampling = SamplingParams(temperature=0.7, seed=3, max_tokens=64)
        events = list(engine.chat([ChatMessage("user", QUESTION)], sampling, AUTO))
    finally:
        del speculator._draft
    from_history = [d for d in drafts if d.drafter == DrafterKind.HISTORY]
    assert from_history, "the earlier answer should have been drafted from"
    assert all(p is None for d in from_history for p in d.p_draft)
    done = events[-1]
    assert done.finish_reason.value in ("stop", "length")
    assert done.stats.tokens_by_source.get(TokenSource.HISTORY.value, 0) > 0


def test_history_survives_a_restart_and_forgetting_removes_it(smollm2_path, tmp_path):
    spec = ModelSpec(smollm2_path, n_ctx=2048)
    engine = Engine(spec, history_dir=tmp_path)
    answer(engine, remember=7)
    answer(engine, "What is the capital of France? Answer in one sentence.", remember=8)
    engine.close()

    engine = steady(Engine(spec, history_dir=tmp_path))
    try:
        assert engine.history.problem == "" and engine.history.conversations() == {7, 8}
        assert history_rounds(answer(engine)) > 0
        engine.forget_history(7)
        assert engine.history.conversations() == {8}
        assert history_rounds(answer(engine)) == 0  # the deleted chat's text can no longer be drafted
    finally:
        engine.close()
    engine = steady(Engine(spec, history_dir=tmp_path))
    try:
        assert engine.history.conversations() == {8}
        assert history_rounds(answer(engine)) == 0
    finally:
        engine.close()


def test_another_vocabulary_never_sees_this_history(smollm2_path, gemma3_path, tmp_path):
    smol = Engine(ModelSpec(smollm2_path, n_ctx=2048), history_dir=tmp_path)
    answer(smol, remember=1)
    smol_folder = smol.history.folder
    smol.close()
    gemma = Engine(ModelSpec(gemma3_path, n_ctx=2048), history_dir=tmp_path)
    try:
        assert gemma.history.folder != smol_folder
        assert gemma.history.n_tokens == 0
        assert history_rounds(answer(gemma)) == 0
        gemma.forget_history(1)  # deleting the chat reaches the other vocabulary's folder too
    finally:
        gemma.close()
    smol = Engine(ModelSpec(smollm2_path, n_ctx=2048), history_dir=tmp_path)
    try:
        assert smol.history.conversations() == set()
    finally:
        smol.close()


def test_an_answer_that_was_stopped_is_not_remembered(engine_with_history):
    import threading

    cancel = threading.Event()
    cancel.set()
    engine = engine_with_history
    list(engine.chat([ChatMessage("user", QUESTION)], GREEDY, AUTO, cancel, remember=3))
    assert engine.history.n_tokens == 0


def test_the_cap_keeps_the_newest_conversations(smollm2_path, tmp_path):
    engine = Engine(ModelSpec(smollm2_path, n_ctx=2048), history_dir=tmp_path, history_max_tokens=250)
    try:
        for conversation, question in enumerate(
            ["Name three colours.", "Name three fruits.", "Name three rivers.", "Name three planets."]
        ):
            answer(engine, question, sampling=SamplingParams(temperature=0.0, max_tokens=48), remember=conversation)
        assert engine.history.wait(30)
        assert 0 < engine.history.n_tokens <= 250
        assert 3 in engine.history.conversations() and 0 not in engine.history.conversations()
    finally:
        engine.close()
