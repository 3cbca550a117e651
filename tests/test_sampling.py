"""Sampling as pure functions on hand-computed vectors (no model)."""

import numpy as np
import pytest

from engine.config import SamplingParams
from engine.decoding.sampling import Distribution, distribution, greedy_token, residual


def test_greedy_is_a_point_mass_on_the_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    d = distribution(logits, SamplingParams(temperature=0.0))
    assert greedy_token(logits) == 1
    assert d.ids.tolist() == [1] and d.probs.tolist() == [1.0]


def test_temperature_one_without_filters_is_the_softmax():
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [0, 1, 2]
    np.testing.assert_allclose(d.probs, [0.5, 0.3, 0.2])


def test_top_k_keeps_the_k_most_likely():
    logits = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [1, 3]
    np.testing.assert_allclose(d.probs, [0.4 / 0.7, 0.3 / 0.7])


@pytest.mark.parametrize("n_allowed", [2, 5, 300])
def test_top_k_on_a_masked_row_draws_only_what_the_mask_allows(n_allowed):
    """A grammar leaves most of the row at -inf: the candidates are the best k of the rest (all of it
    when fewer), as if the forbidden tokens were merely very unlikely."""
    rng = np.random.default_rng(7)
    logits = rng.normal(size=1000).astype(np.float32)
    masked = np.full_like(logits, -np.inf)
    allowed = rng.choice(1000, n_allowed, replace=False)
    masked[allowed] = logits[allowed]
    unlikely = np.where(np.isfinite(masked), masked, -1e30).astype(np.float32)
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    got, expected = distribution(masked, params), distribution(unlikely, params)
    kept = expected.probs > 0
    assert sorted(got.ids.tolist()) == sorted(expected.ids[kept].tolist()) and set(got.ids) <= set(allowed)
    np.testing.assert_allclose(sorted(got.probs), sorted(expected.probs[kept]), rtol=1e-6)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    assert d.ids.tolist() == [0, 1]  # 0.5 + 0.3 reaches 0.8
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.81, min_p=0.0))
    assert d.ids.tolist() == [0, 1, 2]


def test_min_p_cuts_relative_to_the_best():
    logits = np.log(np.array([0.6, 0.3, 0.07, 0.03]))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1))
    assert d.ids.tolist() == [0, 1, 2]  # 0.03 < 0.1 * 0.6


def test_temperature_sharpens_after_the_cuts():
    logits = np.log(np.array([0.5, 0.25, 0.25]))
    d = distribution(logits, SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
    # p^(1/T) renormalised: 0.25, 0.0625, 0.0625 -> 2/3, 1/6, 1/6
    np.testing.assert_allclose(d.probs, [2 / 3, 1 / 6, 1 / 6])


def test_residual_is_the_normalised_positive_part():
    p_target = Distribution(np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2]))
    p_draft = Distribution(np.array([1, 0, 3]), np.array([0.6, 0.2, 0.2]))
    r = residual(p_target, p_draft)
    # max(pt - pd, 0): id0 0.3, id1 0, id2 0.2 -> 0.6, 0.4
    assert r.ids.tolist() == [0, 2]
    np.testing.assert_allclose(r.probs, [0.6, 0.4])
    assert residual(p_target, p_target) is None


def test_sampling_follows_the_probabilities():
    d = Distribution(np.array([7, 3, 9]), np.array([0.6, 0.3, 0.1]))
    rng = np.random.default_rng(0)
    draws = np.array([d.sample(rng) for _ in range(20000)])
    freq = [(draws == t).mean() for t in (7, 3, 9)]
    np.testing.assert_allclose(freq, [0.6, 0.3, 0.1], atol=0.015)


@pytest.mark.parametrize("top_k", [0, 5])
def test_same_seed_same_samples(top_k):
    logits = np.random.default_rng(1).normal(size=50).astype(np.float32)
    params = SamplingParams(temperature=0.8, top_k=top_k, seed=3)
    d = distribution(logits, params)
    a = [d.sample(np.random.default_rng(3)) for _ in range(5)]
    b = [d.sample(np.random.default_rng(3)) for _ in range(5)]
    assert a == b
