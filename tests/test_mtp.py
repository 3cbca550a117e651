"""MTP drafting: a Qwen3.5 whose GGUF carries a next-token-prediction head drafts with it, losslessly.

The models are llama.cpp's Qwen3.5 fixture with an MTP block added (tests/mtp_fixture.py): one
with a random head (its drafts mostly rejected: rollbacks on a hybrid model every round) and one
whose head predicts exactly what the target will (its drafts accepted at temperature 0).
"""

from __future__ import annotations

import pytest

from engine.config import ChatMessage, DrafterKind, DrafterMode, ModelSpec, SamplingParams, SpecParams, TokenSource
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, FinishReason, TokenEvent
from engine.decoding.policy import FixedCosts
from engine.llama.runner import ModelRunner
from tests.mtp_fixture import with_mtp_head
from tests.synthetic_models import synthetic
from tests.test_engine import TripsAfter

GREEDY = SamplingParams(temperature=0.0, max_tokens=32)
MTP = SpecParams(mode=DrafterMode.MTP, draft_length=4)
OFF = SpecParams(mode=DrafterMode.OFF)
ASK = [ChatMessage("user", "tok_5 tok_9 say something long")]


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mtp")
    base = synthetic("qwen35")
    random = with_mtp_head(base, folder / "qwen35-mtp-random.gguf")
    predictable = with_mtp_head(base, folder / "qwen35-mtp-echo.gguf", predictable=True)
    return str(random), str(predictable)


def engine(path: str, **options) -> Engine:
    return Engine(ModelSpec(path, n_ctx=512, n_gpu_layers=0, **options))


def answer(e: Engine, messages=ASK, sampling=GREEDY, params=MTP, cancel=None):
    tokens, sources, done = [], [], None
    for event in e.chat(messages, sampling, params, cancel):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
            sources.append(event.source)
        elif isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return tokens, sources, done


def test_the_head_loads_with_the_model_or_stays_on_disk_as_the_user_chooses(heads):
    random, _ = heads
    with_head, without = ModelRunner(ModelSpec(random, n_ctx=256)), ModelRunner(ModelSpec(random, n_ctx=256, mtp=False))
    try:
        assert with_head.info.nextn_layers == 1 and with_head.mtp is not None and not with_head.mtp_problem
        assert without.mtp is None and "not loaded" in without.mtp_problem
        assert not with_head.can_pad  # the head follows every decoded token (and this target is hybrid)
        loaded = sum(with_head.weight_buffers.values()) - sum(without.weight_buffers.values())  # MiB
        assert loaded * 2**20 == pytest.approx(with_head.info.mtp_bytes, rel=0.01), "its weights load only when asked"
        assert with_head.context_bytes > without.context_bytes, "and it has a context of its own"
    finally:
        with_head.close()
        without.close()


def test_a_random_head_drafts_and_the_answer_is_exactly_the_plain_one(heads):
    e = engine(heads[0])
    try:
        plain, _, _ = answer(e, params=OFF)
        tokens, _, done = answer(e)
        assert tokens == plain
        assert done.stats.n_drafted > 0 and done.stats.n_accepted < done.stats.n_drafted
        assert {r.drafter for r in done.stats.rounds} >= {DrafterKind.MTP}
        assert e.target.checkpoints.counters.restored > 0, "rejected drafts were undone on the hybrid target"
        assert e.target.mtp.problem is None
    finally:
        e.close()


def test_a_head_that_predicts_the_target_has_its_drafts_accepted(heads):
    e = engine(heads[1])
    try:
        plain, _, _ = answer(e, params=OFF)
        tokens, sources, done = answer(e)
        assert tokens == plain
        assert done.stats.n_accepted == done.stats.n_drafted > 10
        assert (
            TokenSource.MTP in sources and done.stats.tokens_by_source[TokenSource.MTP.value] == done.stats.n_accepted
        )
    finally:
        e.close()


def test_seeded_sampled_mtp_speculation_repeats(heads):
    e = engine(heads[0])
    try:
        sampled = SamplingParams(temperature=0.9, max_tokens=32, seed=5)
        one, _, d1 = answer(e, sampling=sampled)
        two, _, _ = answer(e, sampling=sampled)
        assert one == two and d1.stats.n_drafted > 0
    finally:
        e.close()


def test_the_head_follows_regenerate_the_next_turn_and_a_cancel(heads):
    e, fresh = engine(heads[1]), engine(heads[1], mtp=False)
    try:
        first, _, done = answer(e)
        assert answer(e)[0] == first, "regenerate"
        turn2 = [*ASK, ChatMessage("assistant", done.text), ChatMessage("user", "tok_3 and then?")]
        tokens, _, second = answer(e, turn2)
        assert tokens == answer(fresh, turn2, params=OFF)[0]
        assert second.stats.n_accepted == second.stats.n_drafted > 0, "the head followed the restored state"
        cancel = TripsAfter(4)
        assert answer(e, [ChatMessage("user", "tok_1 " * 60)], cancel=cancel)[2].finish_reason == FinishReason.CANCELLED
        tokens, _, after = answer(e, turn2)
        assert tokens == answer(fresh, turn2, params=OFF)[0] and after.stats.n_accepted == after.stats.n_drafted
    finally:
        e.close()
        fresh.close()


def test_auto_drafts_with_the_head_where_verification_is_cheap(heads):
    """A GPU's costs: verifying 8 tokens about as dear as one step, a head step a twentieth of it."""
    e = engine(heads[1])
    try:
        e.speculator.costs = FixedCosts({1: 0.010, 2: 0.0102, 4: 0.0105, 8: 0.011}, mtp_step_s=0.0005)
        e.speculator.forget_acceptance()
        tokens, _, done = answer(e, params=SpecParams())
        assert tokens == answer(e, params=OFF)[0]
        assert done.stats.by_drafter()[DrafterKind.MTP].accepted > 10
    finally:
        e.close()
