"""What the server did, request by request: for the terminal, the app's log view and the tests."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One request. Filled in as it goes: by the HTTP side (status, client gone) and the engine's
    thread (tokens, finish). finish: stop, length, cancelled (client gone or server stopping),
    error, rejected (answered 4xx before reaching the engine)."""

    id: int
    method: str
    path: str
    client: str = ""
    stream: bool = False
    status: int = 0
    t_received: float = field(default_factory=time.time)
    t_started: float | None = None  # when the engine started on it (time.time)
    queue_wait_s: float | None = None
    n_prompt_tokens: int = 0
    n_cached_tokens: int = 0
    n_tokens: int = 0
    max_tokens: int = 0
    gen_tps: float = 0.0
    n_drafted: int = 0
    n_accepted: int = 0
    estimated_speedup: float = 0.0
    n_passages: int | None = None  # passages of the user's documents given with the question (None: none asked)
    finish: str = ""
    error: str = ""
    duration_s: float = 0.0
    client_gone: bool = False

    @property
    def finished(self) -> bool:
        return bool(self.finish)

    def line(self) -> str:
        """One line, for the terminal and the app's log view."""
        parts = [f"#{self.id} {self.method} {self.path} {self.status or '…'}"]
        if self.stream:
            parts.append("stream")
        if self.queue_wait_s is not None:
            parts.append(f"waited {self.queue_wait_s:.2f} s")
        if self.n_passages is not None:
            parts.append(f"{self.n_passages} passage{'' if self.n_passages == 1 else 's'} from documents")
        if self.n_tokens or self.finish in ("stop", "length", "cancelled"):
            parts.append(f"{self.n_tokens} tokens ({self.gen_tps:.1f} tok/s)")
            if self.n_cached_tokens:
                parts.append(f"prompt {self.n_prompt_tokens} ({self.n_cached_tokens} cached)")
            if self.n_drafted:
                parts.append(f"accepted {self.n_accepted}/{self.n_drafted}")
            parts.append(f"~{self.estimated_speedup:.2f}x (est.)")
        if self.finish:
            parts.append(self.finish + (" (client gone)" if self.client_gone and self.finish == "cancelled" else ""))
        if self.error:
            parts.append(self.error.splitlines()[0])
        return " · ".join(parts)


class RequestLog:
    """The last `size` requests; thread-safe. Listeners get each record when it is finished."""

    def __init__(self, size: int = 200):
        self._records: deque[RequestRecord] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[RequestRecord], None]] = []

    def begin(self, method: str, path: str, client: str = "") -> RequestRecord:
        record = RequestRecord(next(self._ids), method, path, client)
        with self._lock:
            self._records.append(record)
        return record

    def finish(self, record: RequestRecord, finish: str, status: int | None = None, error: str = "") -> None:
        """Mark done (once: a second call, e.g. the client leaving after the engine ended, is ignored)."""
        with self._lock:
            if record.finished:
                return
            if status is not None:
                record.status = status
            record.finish, record.error = finish, error
            record.duration_s = time.time() - record.t_received
        for callback in list(self._listeners):
            callback(record)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def find(self, record_id: int) -> RequestRecord | None:
        return next((r for r in self.records() if r.id == record_id), None)

    def add_listener(self, callback: Callable[[RequestRecord], None]) -> None:
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[RequestRecord], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)
