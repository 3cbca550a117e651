"""bench_lossless's verdict on where and why two answers part, on hand-made rows (no model): at T = 0 the
logit gap, above it the keyed scores and the cause (near tie, truncation edge, rejection rule)."""

import numpy as np
import pytest

from engine.bench_lossless import compare
from engine.config import SamplingParams
from engine.decoding.sampling import Draws, distribution, keyed_scores

VOCAB = 16
N_PROMPT = 3
SAMPLED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05, seed=7)


def answer(tokens, rows):
    """(answer tokens, prompt length, rows by position) as answer_rows gives them: the row at N_PROMPT + i - 1
    predicts answer token i."""
    return (
        list(tokens),
        N_PROMPT,
        {N_PROMPT - 1 + i: (np.asarray(row, dtype=np.float32), 1) for i, row in enumerate(rows)},
    )


def row(**logits) -> np.ndarray:
    out = np.full(VOCAB, -30.0)
    for token, value in logits.items():
        out[int(token[1:])] = value
    return out


def test_identical_answers_do_not_part():
    rows = [row(t1=2.0, t2=1.0)] * 2
    assert compare("p", "lookup", answer([1, 1], rows), answer([1, 1], rows)).at is None


def test_at_temperature_0_the_gap_is_between_the_two_logits():
    plain = answer([1, 1], [row(t1=2.0, t2=1.0), row(t1=2.0, t2=1.98)])
    spec = answer([1, 2], [row(t1=2.0, t2=1.0), row(t1=1.97, t2=1.99)])
    parting = compare("p", "lookup", plain, spec)
    assert parting.at == 1
    assert parting.plain_gap == pytest.approx(0.02, abs=1e-4) and parting.spec_gap == pytest.approx(0.02, abs=1e-4)
    assert parting.plain_rank == 2 and parting.cause == "near tie"


def sampled_parting(plain_row, spec_row, spec_token=None):
    """Answers that agree on token 0 and take each row's keyed draw at token 1 (or spec_token there)."""
    key = Draws(SAMPLED.seed).at(N_PROMPT + 1)
    mine = distribution(plain_row, SAMPLED).drawn_with(key)
    theirs = distribution(spec_row, SAMPLED).drawn_with(key) if spec_token is None else spec_token
    first = row(t1=5.0)
    parting = compare("p", "m", answer([1, mine], [first, plain_row]), answer([1, theirs], [first, spec_row]), SAMPLED)
    return parting, key, mine, theirs


def test_above_temperature_0_a_nudged_near_tie_is_found_by_its_keyed_scores():
    # Two candidates whose keyed scores (logit + own noise at T = 1) differ by 0.001 one way in plain's row and
    # the other way in speculation's: rounding that small decides which one is drawn.
    key = Draws(SAMPLED.seed).at(N_PROMPT + 1)
    noise = keyed_scores(distribution(row(t1=0.0, t2=0.0), SAMPLED), key, [1, 2])  # equal logits: noise alone
    even = float(noise[1] - noise[0])  # token 1's logit lead that makes the two scores tie
    parting, _, mine, theirs = sampled_parting(row(t1=even + 0.001, t2=0.0), row(t1=even - 0.001, t2=0.0))
    assert (mine, theirs) == (1, 2)
    assert parting.at == 1 and parting.cause == "near tie"
    assert parting.plain_gap == pytest.approx(0.001, abs=1e-4) and parting.spec_gap == pytest.approx(0.001, abs=1e-4)


def test_above_temperature_0_a_token_one_row_cuts_is_a_truncation_edge():
    # min-p 0.05: token 3 at a probability just above it in plain's row, just below in speculation's.
    edge = np.log(0.05 * 1.02)
    plain_row, spec_row = row(t1=0.0, t2=0.0, t3=edge + 0.002), row(t1=0.0, t2=0.0, t3=edge - 0.05)
    for seed in range(200):  # a key under which plain draws the edge token
        sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05, seed=seed)
        key = Draws(seed).at(N_PROMPT + 1)
        if distribution(plain_row, sampling).drawn_with(key) == 3:
            break
    else:
        pytest.fail("no key among 200 draws a 5 % token")
    theirs = distribution(spec_row, sampling).drawn_with(key)
    first = row(t1=5.0)
    parting = compare(
        "p", "lookup", answer([1, 3], [first, plain_row]), answer([1, theirs], [first, spec_row]), sampling
    )
    assert parting.at == 1 and parting.cause == "truncation edge"
    assert parting.spec_gap == np.inf  # speculation's row cut plain's token


def test_above_temperature_0_a_token_that_is_not_the_keyed_draw_is_the_rejection_rule():
    rows = row(t1=0.0, t2=0.0, t4=0.0)
    parting, key, mine, _ = sampled_parting(rows, rows, spec_token=None)
    assert parting.at is None  # the same rows and key: the same draw
    other = next(t for t in (1, 2, 4) if t != mine)
    parting, *_ = sampled_parting(rows, rows, spec_token=other)
    assert parting.at == 1 and parting.cause == "rejection rule"
