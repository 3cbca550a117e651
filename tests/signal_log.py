"""Waiting for signals that another thread emits, by what they leave rather than with qtbot.waitSignal.

A waitSignal blocker connects for one wait and disconnects after it; when a thread emits the same signal
again while an earlier emission is still queued, the queued call can reach a blocker that is already being
garbage-collected (pytest-qt then raises from inside the event loop: CI saw "'SignalBlocker' object has no
attribute 'check_params_callback'"). One slot kept for the whole test has no such window.
"""

from __future__ import annotations

from collections.abc import Callable


class SignalLog:
    """Every emission of a signal since it was made, as tuples of arguments."""

    def __init__(self, signal):
        self.seen: list[tuple] = []
        signal.connect(lambda *args: self.seen.append(args))

    def mark(self) -> int:
        """Where the log stands now: wait() after an action looks only at what came since."""
        return len(self.seen)

    def wait(self, qtbot, since: int, found: Callable[..., bool] = lambda *args: True, timeout_ms: int = 60_000):
        """The emissions since `since`, once one of them is `found`; qtbot's timeout error when none is."""
        qtbot.waitUntil(lambda: any(found(*args) for args in self.seen[since:]), timeout=timeout_ms)
        return self.seen[since:]
