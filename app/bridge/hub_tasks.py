"""Blocking calls (the hub, downloads, header reads) on a private thread pool, results by signal.

The GUI thread never waits on the network. A task is a plain function run on a pool thread;
what it returns, raises or reports arrives on the GUI thread as a queued signal. Threading
contract for a task's function: don't touch any widget in it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal, Slot

from engine.errors import EngineError, user_message

log = logging.getLogger(__name__)

Report = Callable[[object], None]  # what a task calls to report progress (any thread)


class _Relay(QObject):
    """One per process, made on the GUI thread and never deleted. Pool threads only emit on it.

    No Qt object is ever released or destroyed on a pool thread: a per-task QObject whose last
    Python reference died with its QRunnable on the pool thread, while the GUI thread deleted it,
    crashed the app now and then (a use after free inside processEvents).
    """

    arrived = Signal(int, str, object)  # (task id, "progressed" | "succeeded" | "failed", value)

    def __init__(self):
        super().__init__()
        self.waiting: dict[int, tuple] = {}  # task id -> (owner, on_success, on_failure, on_progress); GUI thread only
        self.arrived.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    @Slot(int, str, object)
    def _deliver(self, task: int, kind: str, value: object) -> None:
        entry = self.waiting.get(task) if kind == "progressed" else self.waiting.pop(task, None)
        if entry is None:
            return
        owner, on_success, on_failure, on_progress = entry
        if not shiboken6.isValid(owner) or owner.closed:  # the window that asked is gone (or going)
            log.debug("a background task finished after its window closed")
            return
        callback = {"succeeded": on_success, "failed": on_failure, "progressed": on_progress}[kind]
        if callback is not None:
            callback(value)


_relay: _Relay | None = None
_ids = itertools.count(1)


def _the_relay() -> _Relay:
    global _relay
    if _relay is None:
        _relay = _Relay()
    return _relay


def _run(fn: Callable[[Report], object], task: int, relay: _Relay) -> None:
    """On a pool thread: run fn, and post what it reports, returns or raises to the GUI thread."""
    try:
        result = fn(lambda value: relay.arrived.emit(task, "progressed", value))
    except Exception as e:  # noqa: BLE001 - every failure becomes a message, never a silent thread
        if not isinstance(e, EngineError):  # a bug, not a hub failure: logged with its traceback
            log.exception("background task failed")
        relay.arrived.emit(task, "failed", user_message(e))
    else:
        relay.arrived.emit(task, "succeeded", result)


class BackgroundTasks(QObject):
    """A few pool threads for one window; wait() before the window goes away."""

    def __init__(self, parent: QObject | None = None, max_threads: int = 3):
        super().__init__(parent)
        self.closed = False  # set by wait(): results that arrive later are dropped
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="specula-task")
        self._futures: set[Future] = set()

    def start(
        self,
        fn: Callable[[Report], object],
        on_success: Callable[[object], None],
        on_failure: Callable[[str], None],
        on_progress: Callable[[object], None] | None = None,
    ) -> None:
        """Run fn(report) on a pool thread; the callbacks run on the GUI thread (this one)."""
        self.closed = False
        relay, task = _the_relay(), next(_ids)
        relay.waiting[task] = (self, on_success, on_failure, on_progress)
        future = self._pool.submit(_run, fn, task, relay)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)

    def active(self) -> int:
        return sum(not f.done() for f in list(self._futures))

    def wait(self, msecs: int = -1) -> bool:
        """Block until every task has finished (True) or msecs passed (False); results that
        arrive after this are dropped (the window is closing)."""
        self.closed = True
        _done, pending = futures_wait(list(self._futures), timeout=None if msecs < 0 else msecs / 1000)
        return not pending
