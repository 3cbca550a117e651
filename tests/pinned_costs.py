"""An engine with decoding costs pinned, for tests of which drafter auto or a chosen mode uses.

A session-wide engine calibrates once, at whatever load the machine had then (CI runs other work beside
the tests only rarely; a developer's machine often does), and keeps what earlier tests taught it of each
drafter's acceptance. Where two drafters offer the same run, which one wins must depend on neither."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.decoding.policy import FixedCosts

# A 2-core CPU's shape for a small model: one more verified token costs about half a step.
CPU_COSTS = {1: 0.027, 2: 0.040, 4: 0.070, 8: 0.122}


@contextmanager
def pinned_costs(engine) -> Iterator[None]:
    saved = engine.speculator.costs
    engine.speculator.costs = FixedCosts(CPU_COSTS)
    engine.speculator.forget_acceptance()
    try:
        yield
    finally:
        engine.speculator.costs = saved
