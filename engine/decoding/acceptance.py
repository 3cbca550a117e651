"""The acceptance rule: which draft tokens the target keeps, and what comes after them. Pure numpy.

Given k draft tokens and the target's k+1 distributions from one verification batch (row i is
the target's distribution after the prefix plus drafts[:i]), return how many drafts are accepted
and the one token the target adds after them. The output follows the target's distribution
exactly (Leviathan et al. 2023; Chen et al. 2023).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.decoding.sampling import Distribution, residual


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # drafts kept, 0..k
    next_token: int  # the target's own token after them: correction or bonus


def verify_greedy(target_argmax: list[int], drafts: list[int]) -> Verdict:
    """Temperature 0: keep drafts while they equal the target's argmax at their position."""
    assert len(target_argmax) == len(drafts) + 1, "one target row per draft, plus the bonus row"
    n = 0
    while n < len(drafts) and drafts[n] == target_argmax[n]:
        n += 1
    return Verdict(n, target_argmax[n])


def verify_sampled(
    p_target: Sequence[Distribution],
    drafts: list[int],
    p_draft: list[Distribution | None],
    rng: np.random.Generator,
    draw: Callable[[int], int],
) -> Verdict:
    """Temperature > 0: the rejection rule.

    Draft token x, proposed with probability p_draft(x), is kept with probability
    min(1, p_target(x) / p_draft(x)). The first rejection samples from
    normalize(max(p_target - p_draft, 0)). A fully accepted draft takes a bonus token from the
    target's last row. A deterministic drafter (prompt lookup) passes None for p_draft: it is a
    point mass on x, so this reduces to "keep x with probability p_target(x)", which is done as
    "keep x iff it is the target's own draw at its position": draw(i) is the key of row i's position
    (sampling.Draws), and the target's draw there is its token after a rejection too. So the tokens
    that come out are those plain decoding draws with the same keys.
    p_target may be lazy: rows after the first rejection are never read.
    """
    assert len(p_target) == len(drafts) + 1, "one target row per draft, plus the bonus row"
    assert len(p_draft) == len(drafts)
    for i, x in enumerate(drafts):
        pd = p_draft[i]
        if pd is None:
            own = p_target[i].drawn_with(draw(i))
            if own == x:
                continue
            return Verdict(i, own)
        pt_x, pd_x = p_target[i].prob_of(x), pd.prob_of(x)
        if pd_x > 0.0 and rng.random() * pd_x < pt_x:  # u < p_t/p_d without dividing
            continue
        left = residual(p_target[i], pd)
        return Verdict(i, left.sample(rng) if left else p_target[i].drawn_with(draw(i)))
    return Verdict(len(drafts), p_target[-1].drawn_with(draw(len(drafts))))
