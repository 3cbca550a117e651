"""Hybrid and recurrent models (Qwen3.5, LFM2, Granite 4.0-H, Falcon-H1, Mamba 1 and 2) through the real llama.cpp.

Their recurrent state cannot be partially erased, so every rollback — a rejected draft, the next
turn, a regenerate, an edit, a cancelled answer — goes through a state checkpoint. Each test
compares with what a fresh context computes, which is what a wrong state would break. The models
are llama.cpp's own random-weight fixtures (tests/synthetic_models.py): a target and a draft of
other weights, so the draft is mostly rejected and rollbacks are many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, FinishReason, TokenEvent
from engine.llama import memory
from engine.llama.memory import CheckpointKind, MemoryKind
from engine.llama.runner import ModelRunner
from tests.synthetic_models import ATTENTION, DRAFT_SEED, HYBRID, RECURRENT, synthetic
from tests.test_engine import TripsAfter

ARCHS = HYBRID + RECURRENT
GREEDY = SamplingParams(temperature=0.0, max_tokens=32)
OFF, DRAFT = SpecParams(mode=DrafterMode.OFF), SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4)
ASK = [ChatMessage("user", "tok_5 tok_9 say something long")]


def spec(path: str) -> ModelSpec:
    return ModelSpec(path, n_ctx=512, n_gpu_layers=0)


def engine(arch: str, with_draft: bool = True) -> Engine:
    draft = spec(str(synthetic(arch, DRAFT_SEED))) if with_draft else None
    return Engine(spec(str(synthetic(arch))), draft)


@dataclass
class Answer:
    tokens: list[int]
    done: DoneEvent

    @property
    def stats(self):
        return self.done.stats

    @property
    def text(self) -> str:
        return self.done.text


def answer(e: Engine, messages=ASK, sampling=GREEDY, params=OFF, cancel=None) -> Answer:
    tokens, done = [], None
    for event in e.chat(messages, sampling, params, cancel):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, DoneEvent):
            done = event
    assert done is not None and done.error is None, done.error if done else "no DoneEvent"
    return Answer(tokens, done)


def fresh_answer(arch: str, messages, sampling=GREEDY) -> Answer:
    e = engine(arch, with_draft=False)
    try:
        return answer(e, messages, sampling)
    finally:
        e.close()


@pytest.mark.parametrize("arch", ARCHS + ATTENTION)
def test_the_memory_kind_is_known_at_load(arch):
    runner = ModelRunner(spec(str(synthetic(arch))))
    expected = MemoryKind.HYBRID if arch in HYBRID else MemoryKind.RECURRENT if arch in RECURRENT else MemoryKind.KV
    assert runner.memory == expected
    assert runner.rollback_problem is None
    assert runner.can_pad == (expected == MemoryKind.KV)  # a recurrent state would take padding in
    runner.close()


@pytest.mark.parametrize("arch", ARCHS + ATTENTION)
def test_going_back_inside_the_cache_gives_a_fresh_contexts_logits(arch):
    """60 tokens, then the first 20 and 10 new ones (every second turn, regenerate and rejected draft
    does this): on today's llama.cpp a recurrent memory refuses the erase, and decoding on regardless
    failed with 'llama_decode failed (code -1)'."""
    path = str(synthetic(arch))
    runner, fresh = ModelRunner(spec(path)), ModelRunner(spec(path))
    n = runner.n_vocab
    runner.eval([(7 * i) % n for i in range(60)], 1)
    again = [(7 * i) % n for i in range(20)] + [(3 * i + 1) % n for i in range(10)]
    np.testing.assert_array_equal(runner.eval(again, 1), fresh.eval(again, 1))
    assert runner.cached == again
    if arch not in ATTENTION:
        assert runner.checkpoints.counters.cleared == 1, "no checkpoint held the prefix: it started again, empty"
    runner.close()
    fresh.close()


@pytest.mark.parametrize("arch", ["qwen35", "mamba2"])
def test_a_checkpoint_spares_the_re_evaluation(arch):
    path = str(synthetic(arch))
    runner, fresh = ModelRunner(spec(path)), ModelRunner(spec(path))
    n = runner.n_vocab
    head = [(7 * i) % n for i in range(20)]
    runner.eval(head, 0, checkpoint=CheckpointKind.TURN)
    runner.eval(head + [(5 * i) % n for i in range(40)], 1)
    again = head + [(3 * i + 1) % n for i in range(10)]
    np.testing.assert_array_equal(runner.eval(again, 1), fresh.eval(again, 1))
    assert runner.checkpoints.counters.restored == 1 and runner.checkpoints.counters.cleared == 0
    assert runner.last_decoded == 10, "only what follows the checkpoint was evaluated"
    runner.close()
    fresh.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_two_turns_regenerate_and_edit_answer_as_a_fresh_engine_does(arch):
    e = engine(arch)
    try:
        first = answer(e)
        regenerated = answer(e)
        assert regenerated.tokens == first.tokens
        assert regenerated.stats.n_prompt_evaluated == 1, "regenerate starts from the prompt's checkpoint"
        turn2 = [*ASK, ChatMessage("assistant", first.text), ChatMessage("user", "tok_3 and then?")]
        second = answer(e, turn2)
        assert second.tokens == fresh_answer(arch, turn2).tokens
        assert second.stats.n_prompt_evaluated < second.stats.n_prompt_tokens, "turn 1 was not re-evaluated"
        edited = [*turn2[:2], ChatMessage("user", "tok_7 something else")]
        after_edit = answer(e, edited)
        assert after_edit.tokens == fresh_answer(arch, edited).tokens
        assert after_edit.stats.n_prompt_evaluated < after_edit.stats.n_prompt_tokens
        assert e.target.checkpoints.counters.restored >= 3
    finally:
        e.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_speculation_with_a_rejected_draft_gives_exactly_the_plain_tokens(arch):
    e = engine(arch)
    try:
        plain = answer(e)
        speculated = answer(e, params=DRAFT)
        assert speculated.tokens == plain.tokens
        stats = speculated.stats
        assert stats.n_drafted > 0 and stats.n_accepted < stats.n_drafted, "drafts were rejected and rolled back"
        assert e.target.checkpoints.counters.restored > 0
        lookup = answer(e, params=SpecParams(mode=DrafterMode.LOOKUP, draft_length=4))
        assert lookup.tokens == plain.tokens
    finally:
        e.close()


@pytest.mark.parametrize("arch", ARCHS)
def test_seeded_sampled_speculation_repeats(arch):
    e = engine(arch)
    try:
        sampled = SamplingParams(temperature=0.9, max_tokens=32, seed=11)
        one = answer(e, sampling=sampled, params=DRAFT)
        two = answer(e, sampling=sampled, params=DRAFT)
        assert one.tokens == two.tokens and one.stats.n_drafted > 0
    finally:
        e.close()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("reads", [3, 12])
def test_a_cancelled_answer_leaves_a_state_the_next_answer_builds_on_correctly(arch, reads):
    e = engine(arch)
    try:
        long_ask = [ChatMessage("user", "tok_1 " * 80)]
        cancelled = [*e.chat(long_ask, GREEDY, DRAFT, TripsAfter(reads))][-1]
        assert cancelled.finish_reason == FinishReason.CANCELLED
        assert answer(e, long_ask).tokens == fresh_answer(arch, long_ask).tokens
    finally:
        e.close()


def test_a_state_too_large_to_keep_turns_speculation_off_with_the_reason(monkeypatch):
    monkeypatch.setattr(memory, "DEFAULT_BUDGET_BYTES", 16)  # smaller than any recurrent state
    e = engine("qwen35")
    try:
        assert "larger than the memory allowed" in e.target.rollback_problem
        assert "speculation off" in e.info.speculation_note
        done = answer(e, params=DRAFT)
        assert done.stats.n_drafted == 0 and "speculation off" in done.stats.plain_reason
        assert done.tokens == fresh_answer("qwen35", ASK).tokens
    finally:
        e.close()
