"""Blocking calls (the hub, downloads, header reads) on a private thread pool, results by signal.

The GUI thread never waits on the network. A task is a plain function run on a pool thread;
what it returns, raises or reports arrives on the GUI thread as a queued signal. Threading
contract for a task's function: don't touch any widget in it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from engine.errors import EngineError

log = logging.getLogger(__name__)

Report = Callable[[object], None]  # what a task calls to report progress (any thread)


class _Relay(QObject):
    """Lives on the GUI thread; a pool thread emits, the GUI thread's slots receive (queued)."""

    progressed = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str)


class _Task(QRunnable):
    def __init__(self, fn: Callable[[Report], object], relay: _Relay):
        super().__init__()
        self.fn, self.relay = fn, relay

    def run(self) -> None:
        try:
            result = self.fn(self._report)
        except EngineError as e:
            self._emit("failed", e.user_message())
        except Exception as e:  # a bug, not a hub failure: say so rather than go quiet
            log.exception("background task failed")
            self._emit("failed", f"Something went wrong: {type(e).__name__}: {e}")
        else:
            self._emit("succeeded", result)

    def _report(self, value: object) -> None:
        self._emit("progressed", value)

    def _emit(self, signal: str, value: object) -> None:
        try:
            getattr(self.relay, signal).emit(value)
        except RuntimeError:  # the window that asked is gone (its relay deleted): nobody to tell
            log.debug("a background task finished after its window closed")


class BackgroundTasks(QObject):
    """A few pool threads for one window; wait() before the window goes away."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 3):
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)

    def start(
        self,
        fn: Callable[[Report], object],
        on_success: Callable[[object], None],
        on_failure: Callable[[str], None],
        on_progress: Callable[[object], None] | None = None,
    ) -> None:
        relay = _Relay(self)  # parented here: it outlives the task, and dies with the window
        relay.succeeded.connect(on_success)
        relay.failed.connect(on_failure)
        if on_progress is not None:
            relay.progressed.connect(on_progress)
        relay.succeeded.connect(relay.deleteLater)
        relay.failed.connect(relay.deleteLater)
        self._pool.start(_Task(fn, relay))

    def active(self) -> int:
        return self._pool.activeThreadCount()

    def wait(self, msecs: int = -1) -> bool:
        """Block until every task has finished (True) or msecs passed (False)."""
        return self._pool.waitForDone(msecs)
