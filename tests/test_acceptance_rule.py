"""The acceptance rule reproduces the target's distribution exactly (statistical tests, no model)."""

import numpy as np
import pytest

from engine.config import SamplingParams
from engine.decoding.acceptance import verify_greedy, verify_sampled
from engine.decoding.sampling import Distribution, Draws, distribution

VOCAB = 6
TRIALS = 40000


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson's test at a very strict level: fails only on a real bias, practically never by chance."""
    expected = probs * counts.sum()
    mask = expected > 0
    assert counts[~mask].sum() == 0, "a token with zero target probability was produced"
    chi2 = (((counts - expected) ** 2)[mask] / expected[mask]).sum()
    dof = mask.sum() - 1
    # mean dof, sd sqrt(2 dof): 6 sd above is p < 1e-6
    return chi2 < dof + 6 * np.sqrt(2 * dof)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_draft_token_output_follows_the_target(temperature, seed):
    rng = np.random.default_rng(seed)
    params = SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0)
    p_target = distribution(rng.normal(size=VOCAB) * 2, params)
    p_draft = distribution(rng.normal(size=VOCAB) * 2, params)
    bonus = distribution(rng.normal(size=VOCAB), params)
    counts = np.zeros(VOCAB)
    for _ in range(TRIALS):
        x = p_draft.sample(rng)
        verdict = verify_sampled([p_target, bonus], [x], [p_draft], rng, lambda i: int(rng.integers(2**63)))
        first = x if verdict.n_accepted == 1 else verdict.next_token
        counts[first] += 1
    dense = np.zeros(VOCAB)
    dense[p_target.ids] = p_target.probs
    assert _chi_square_ok(counts, dense)


def test_second_position_follows_the_target_given_the_first():
    """With two drafts, the joint law of the first two output tokens is the target's."""
    rng = np.random.default_rng(7)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    n = 4
    p_t0 = distribution(rng.normal(size=n), params)
    p_t1 = [distribution(rng.normal(size=n), params) for _ in range(n)]  # target after each first token
    p_d0 = distribution(rng.normal(size=n), params)
    p_d1 = [distribution(rng.normal(size=n), params) for _ in range(n)]
    bonus = Distribution.point(0)
    counts = np.zeros((n, n))
    for _ in range(TRIALS):
        x0 = p_d0.sample(rng)
        x1 = p_d1[x0].sample(rng)
        v = verify_sampled([p_t0, p_t1[x0], bonus], [x0, x1], [p_d0, p_d1[x0]], rng, lambda i: int(rng.integers(2**63)))
        if v.n_accepted == 0:
            first = v.next_token
            second = p_t1[first].sample(rng)  # the next round would sample it from the target
        elif v.n_accepted == 1:
            first, second = x0, v.next_token
        else:
            first, second = x0, x1
        counts[first, second] += 1
    joint = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            joint[a, b] = p_t0.prob_of(a) * p_t1[a].prob_of(b)
    assert _chi_square_ok(counts.ravel(), joint.ravel())


def test_deterministic_draft_is_kept_with_the_target_probability():
    """Prompt lookup proposes a fixed token: kept with probability p_target(x), output unbiased."""
    rng = np.random.default_rng(3)
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    p_target = distribution(rng.normal(size=VOCAB), params)
    bonus = Distribution.point(0)
    x = int(p_target.ids[2])
    counts, kept = np.zeros(VOCAB), 0
    for _ in range(TRIALS):
        v = verify_sampled([p_target, bonus], [x], [None], rng, lambda i: int(rng.integers(2**63)))
        kept += v.n_accepted
        counts[x if v.n_accepted else v.next_token] += 1
    dense = np.zeros(VOCAB)
    dense[p_target.ids] = p_target.probs
    assert _chi_square_ok(counts, dense)
    assert abs(kept / TRIALS - p_target.prob_of(x)) < 0.01


def test_fixed_drafts_give_the_tokens_plain_decoding_draws_with_the_same_keys():
    """Lookup's tokens are kept iff they are the target's own draw at their position, and after a rejection the
    target's draw is the next token: whatever was proposed, the tokens out are plain decoding's."""
    rng = np.random.default_rng(5)
    params = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)
    rows = [distribution(rng.normal(size=VOCAB) * 2, params) for _ in range(4)]
    for _ in range(300):
        keys = [int(k) for k in rng.integers(0, 2**63, size=4)]
        plain = [row.drawn_with(key) for row, key in zip(rows, keys, strict=True)]  # one token at a time
        drafts = [int(t) for t in rng.integers(0, VOCAB, size=3)]
        v = verify_sampled(rows, drafts, [None] * 3, rng, lambda i, keys=keys: keys[i])
        assert drafts[: v.n_accepted] + [v.next_token] == plain[: v.n_accepted + 1]
        assert v.n_accepted == next((i for i in range(3) if drafts[i] != plain[i]), 3)


def test_a_keyed_draw_follows_the_probabilities():
    p = distribution(np.random.default_rng(2).normal(size=VOCAB) * 2, SamplingParams(temperature=1.0, top_k=0))
    draws = Draws(seed=11)
    counts = np.bincount([p.drawn_with(draws.at(position)) for position in range(TRIALS)], minlength=VOCAB)
    dense = np.zeros(VOCAB)
    dense[p.ids] = p.probs
    assert _chi_square_ok(counts, dense)
    assert Draws(seed=11).at(5) == draws.at(5) != Draws(seed=12).at(5)


def test_a_keyed_draw_moves_only_where_rounding_or_a_cut_candidate_could_tip_a_near_tie():
    """Another batch width rounds the probabilities a little differently, which can swap two nearly equal
    candidates or cut one at the edge of top-p: for nearly every key the token drawn stays the same."""
    a = Distribution(np.array([7, 3, 9, 4]), np.array([0.40001, 0.39999, 0.15, 0.05]))
    swapped = Distribution(np.array([3, 7, 9]), np.array([0.40001 / 0.95, 0.39999 / 0.95, 0.15 / 0.95]))
    keys = [Draws(seed=3).at(position) for position in range(2000)]
    moved = sum(a.drawn_with(k) != swapped.drawn_with(k) and a.drawn_with(k) != 4 for k in keys)
    assert moved <= 4  # only where a score nearly ties
    counts = np.bincount([a.drawn_with(k) for k in keys], minlength=10)
    assert abs(counts[7] - 800) < 100 and abs(counts[4] - 100) < 45


def test_identical_draft_is_always_accepted_and_takes_the_bonus():
    rng = np.random.default_rng(0)
    p = Distribution(np.array([2, 0, 1]), np.array([0.5, 0.3, 0.2]))
    bonus = Distribution.point(5)
    for _ in range(200):
        x = p.sample(rng)
        v = verify_sampled([p, bonus], [x], [p], rng, lambda i: int(rng.integers(2**63)))
        assert v.n_accepted == 1 and v.next_token == 5


def test_greedy_keeps_drafts_while_they_match_the_argmax():
    assert verify_greedy([4, 5, 6, 7], [4, 5, 9]).n_accepted == 2
    assert verify_greedy([4, 5, 6, 7], [4, 5, 9]).next_token == 6
    assert verify_greedy([4, 5, 6, 7], [4, 5, 6]).n_accepted == 3
    assert verify_greedy([4, 5, 6, 7], [4, 5, 6]).next_token == 7  # the bonus
    assert verify_greedy([1], []).next_token == 1  # a plain step
    assert verify_greedy([1, 2], [3]).n_accepted == 0
