"""A verification padded to a wider batch where that costs less: priced, chosen and lossless.

On some CPUs a batch of 16 tokens decodes faster than one of 14 (the matrix kernels work in tiles),
so the CostModel prices n tokens at the cheapest width of n or more and the target pads to it.
"""

import llama_cpp
import numpy as np
import pytest

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.policy import CostModel, FixedCosts
from engine.llama.runner import ModelRunner
from tests.test_engine import run

# Steps, as measured on an AVX-512 EPYC for the 1.5B starter model: 12–15 tokens cost more than 16.
EPYC = {1: 1.0, 8: 6.92, 12: 8.56, 14: 9.79, 15: 10.42, 16: 8.21, 24: 12.77, 28: 13.76, 31: 15.18, 32: 13.21}


def test_a_width_that_costs_more_than_a_wider_one_is_verified_padded():
    costs = CostModel(EPYC, pads=True)
    assert [costs.verify_width(n) for n in (1, 8, 12, 13, 14, 15, 16, 24, 28, 29, 30, 31, 32)] == [
        1, 8, 12, 16, 16, 16, 16, 24, 28, 29, 32, 32, 32,
    ]  # fmt: skip
    assert costs.verify_s(14) == costs.verify_s(16) == 8.21
    assert costs.verify_s(11) == pytest.approx(6.92 + 3 / 4 * (8.56 - 6.92))  # interpolated, not padded
    assert costs.verify_s(12) == 8.56  # 4% dearer than 16: not worth padding (noise, context length)


def test_a_target_that_cannot_pad_pays_at_least_the_narrower_price():
    costs = CostModel(EPYC, pads=False)
    assert all(costs.verify_width(n) == n for n in range(1, 33))
    assert costs.verify_s(16) == costs.verify_s(15) == 10.42  # the 16-wide kernel is no help unpadded
    assert costs.calibration().padded == {}


def test_padding_is_learned_from_a_width_seen_costing_more_than_a_wider_one():
    costs = CostModel({1: 1.0, 8: 6.92, 16: 8.21, 32: 13.21}, pads=True)
    assert costs.verify_width(14) == 14  # interpolated at 7.89: cheaper than 16
    costs.observe_verify(14, 9.79)
    assert costs.verify_width(14) == 16 and costs.verify_s(14) == 8.21
    assert costs.calibration().padded[14] == 16


def test_info_says_which_widths_are_padded():
    lines = CostModel(EPYC, pads=True).calibration().describe()
    assert "verify 13–15 tokens as a batch of 16: it costs less here" in lines
    assert "verify 30–31 tokens as a batch of 32: it costs less here" in lines


@pytest.fixture(scope="module")
def runner(smollm2_path):
    r = ModelRunner(ModelSpec(smollm2_path, n_ctx=512))
    yield r
    r.close()


def test_a_padded_decode_gives_the_real_tokens_logits_and_leaves_only_them_cached(runner):
    assert runner.can_pad
    tokens = runner.tokenize("The capital of France is Paris. The capital of Italy is Rome. The capital of")
    runner.reset()
    plain = runner.eval(tokens, 6).copy()
    runner.reset()
    padded = runner.eval(tokens, 6, width=16).copy()
    assert len(runner.cached) == len(tokens)
    assert llama_cpp.llama_memory_seq_pos_max(runner._mem, 0) == len(tokens) - 1  # the padding is erased
    assert padded.shape == plain.shape
    clear = [row for row in range(6) if _margin(plain[row]) > 0.5]  # a near tie may flip between widths
    assert clear, "the prompt has rows with a clear favourite"
    assert all(np.argmax(padded[row]) == np.argmax(plain[row]) for row in clear)
    # The same rows up to rounding between batch widths (a CPU's kernels differ by width).
    assert np.abs(padded - plain).max() < 0.05 * np.abs(plain).max()
    # And the cache goes on as if never padded: the next token sees the real tokens only.
    following = int(np.argmax(plain[-1]))
    after_padded = runner.eval(tokens + [following], 1).copy()
    runner.reset()
    runner.eval(tokens, 6)
    after_plain = runner.eval(tokens + [following], 1).copy()
    assert np.abs(after_padded - after_plain).max() < 0.05 * np.abs(after_plain).max()


def _margin(row: np.ndarray) -> float:
    """How far the favourite leads the runner-up, in logits."""
    top_two = np.sort(row)[-2:]
    return float(top_two[1] - top_two[0])


def test_no_padding_past_the_context_or_the_batch(runner):
    tokens = runner.tokenize("one two three four five")
    runner.reset()
    runner.eval(tokens, 2, width=runner.n_batch + 1)  # wider than a batch: decoded unpadded
    runner.eval(tokens, 1, width=runner.n_ctx)  # beyond the context: decoded unpadded
    assert llama_cpp.llama_memory_seq_pos_max(runner._mem, 0) == len(tokens) - 1


QUOTE = [
    ChatMessage(
        "user",
        "Repeat this sentence exactly, then stop: The quick brown fox jumps over the lazy dog while the "
        "farmer counts twelve sheep beside the old stone bridge near the river.",
    )
]


def test_answers_verified_padded_are_the_plain_answers(small_engine, monkeypatch):
    # Every width priced as a batch of 32 (cheaper than any narrower one): each drafted round is padded.
    padded_costs = FixedCosts({1: 0.03, 2: 0.2, 32: 0.1}, pads=True)
    assert {padded_costs.verify_width(n) for n in range(2, 33)} == {32}
    widths = []
    target_eval = small_engine.target.eval

    def recording(tokens, n_logits=1, **options):
        widths.append((n_logits, options.get("width", 0)))
        return target_eval(tokens, n_logits, **options)

    greedy = SamplingParams(temperature=0.0, max_tokens=40)
    _, _, plain = run(small_engine, QUOTE, greedy, SpecParams(mode=DrafterMode.OFF))
    saved = small_engine.speculator.costs
    small_engine.speculator.costs = padded_costs
    monkeypatch.setattr(small_engine.target, "eval", recording)
    try:
        for mode in (DrafterMode.LOOKUP, DrafterMode.DRAFT_MODEL):
            _, _, spec = run(small_engine, QUOTE, greedy, SpecParams(mode=mode, draft_length=6))
            assert spec.stats.n_drafted > 0
            assert spec.text == plain.text, mode
    finally:
        small_engine.speculator.costs = saved
    assert any(n > 1 and width == 32 for n, width in widths)
    target = small_engine.target
    assert llama_cpp.llama_memory_seq_pos_max(target._mem, 0) == len(target.cached) - 1
