"""One engine, many clients: jobs run one at a time, first come first served, with a waiting limit.

The engine is not thread-safe and belongs to one thread. FairQueue does not run anything itself:
it numbers the jobs, counts who waits, refuses past the limit (QueueFull, answered 429), and hands
each job to `dispatch`, which must run it on the engine's thread in the order given — EngineThread
below for the headless server, the app's queued connection to its engine worker in the app. So the
app's own chat and the server's clients wait in one line.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """More requests are waiting than the limit allows."""

    def __init__(self, limit: int):
        super().__init__(f"{limit} requests are already waiting for the model; try again shortly.")
        self.limit = limit


@dataclass
class Ticket:
    """One job's place in line. cancel may be set from any thread: a waiting job is then skipped,
    a running one stops within one decode step (the engine checks it)."""

    id: int
    label: str
    cancel: threading.Event = field(default_factory=threading.Event)
    t_enqueued: float = field(default_factory=time.perf_counter)
    t_started: float | None = None
    t_finished: float | None = None
    owner: object = None  # who submitted it (cancel_all(owner) stops only theirs)
    limited: bool = True  # counts against the waiting limit (the app's own answers do not)

    @property
    def queue_wait_s(self) -> float:
        """Time from joining the line to the engine starting on it (so far, while still waiting)."""
        end = self.t_started if self.t_started is not None else time.perf_counter()
        return end - self.t_enqueued

    @property
    def state(self) -> str:
        if self.t_finished is not None:
            return "done"
        if self.t_started is not None:
            return "running"
        return "cancelled" if self.cancel.is_set() else "waiting"


class FairQueue:
    """Orders jobs for the thread that owns the engine (see the module docstring).

    job(ticket) runs on the engine's thread; it is called even for a ticket cancelled while it
    waited (ticket.cancel is set then), so the job can close what it owes its caller.
    Listeners are called, from whichever thread changed the line, after each change.
    """

    def __init__(self, dispatch: Callable[[Callable[[], None]], None], limit: int = 16):
        self._dispatch = dispatch
        self.limit = limit
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, Ticket] = {}  # in arrival order (dicts keep insertion order)
        self.running: Ticket | None = None
        self._listeners: list[Callable[[], None]] = []

    def submit(
        self,
        label: str,
        job: Callable[[Ticket], None],
        limited: bool = True,
        cancel: threading.Event | None = None,
        owner: object = None,
    ) -> Ticket:
        """Join the line. limited=False for a caller that must never be refused (the app's own chat);
        cancel: the caller's own stop flag, to serve as the ticket's (a new one otherwise)."""
        with self._lock:
            if limited and self._n_waiting(limited_only=True) >= self.limit:
                raise QueueFull(self.limit)
            event = cancel if cancel is not None else threading.Event()
            ticket = Ticket(next(self._ids), label, event, owner=owner, limited=limited)
            self._waiting[ticket.id] = ticket
        self._changed()
        self._dispatch(lambda: self._run(ticket, job))
        return ticket

    def _run(self, ticket: Ticket, job: Callable[[Ticket], None]) -> None:
        with self._lock:
            self._waiting.pop(ticket.id, None)
            self.running = ticket
            ticket.t_started = time.perf_counter()
        self._changed()
        try:
            job(ticket)
        except Exception:  # noqa: BLE001 - a job's failure must not stop the line behind it
            log.exception("job %s failed", ticket.label)
        finally:
            with self._lock:
                self.running = None
                ticket.t_finished = time.perf_counter()
            self._changed()

    def _n_waiting(self, limited_only: bool = False) -> int:
        return sum(1 for t in self._waiting.values() if not t.cancel.is_set() and (t.limited or not limited_only))

    @property
    def n_waiting(self) -> int:
        with self._lock:
            return self._n_waiting()

    def waiting(self) -> list[Ticket]:
        """The tickets waiting now, in order (cancelled ones left out)."""
        with self._lock:
            return [t for t in self._waiting.values() if not t.cancel.is_set()]

    def ahead_of(self, ticket: Ticket) -> int:
        """Jobs that will run before this one (the running one included); 0 once it runs."""
        with self._lock:
            if ticket.id not in self._waiting:
                return 0
            before = [t for t in self._waiting.values() if t.id < ticket.id and not t.cancel.is_set()]
            return len(before) + (1 if self.running is not None else 0)

    def cancel_all(self, owner: object = None) -> None:
        """Stop the running job and skip every waiting one (the server is stopping); with owner,
        only the jobs it submitted (the app's own answer goes on when its server stops)."""
        with self._lock:
            tickets = list(self._waiting.values()) + ([self.running] if self.running else [])
        for t in tickets:
            if owner is None or t.owner is owner:
                t.cancel.set()
        self._changed()

    def add_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:  # noqa: BLE001 - a listener must not break the line
                log.exception("queue listener failed")


class EngineThread:
    """The headless engine's owner: one thread that runs dispatched jobs in order."""

    def __init__(self, name: str = "specula-engine"):
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def dispatch(self, fn: Callable[[], None]) -> None:
        self._jobs.put(fn)

    def _loop(self) -> None:
        while (fn := self._jobs.get()) is not None:
            fn()  # FairQueue._run catches the job's errors

    def close(self, timeout: float = 5.0) -> bool:
        """End the thread once the jobs before this call have run; True if it ended in time."""
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()
