"""Stop for a request in flight: shut its connection from any thread, even before the first byte.

A read blocked in the worker thread only returns when its socket is shut down (closing it from
another thread does not wake it on Linux), and a server such as llama-server sends no headers until
its first token, so a Stop during a long prompt would otherwise wait for the whole prefill. httpcore's
`trace` request extension hands over the socket as soon as it connects; stop() shuts it down,
the blocked read fails at once, and the server sees the client go and stops generating.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

CANCEL_POLL_S = 0.05  # how often a followed cancel Event is looked at


class Hangup:
    """One request's Stop. stop() and follow() may be called from any thread; trace() is the
    httpcore trace callback for the request (connections are not pooled, so each one connects)."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if name != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._socket = sock
            stop_now = self.stopped.is_set()
        if stop_now:
            _shut(sock)

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            sock = self._socket
        if sock is not None:
            _shut(sock)

    def wait(self, seconds: float) -> bool:
        """Sleep up to seconds (a 429's Retry-After); True when stopped meanwhile."""
        return self.stopped.wait(seconds)

    def follow(self, cancel: threading.Event) -> None:
        """Stop when cancel is set, until release(): a daemon thread looks every CANCEL_POLL_S."""

        def watch() -> None:
            while not self._released.is_set():
                if cancel.wait(CANCEL_POLL_S):
                    self.stop()
                    return

        threading.Thread(target=watch, name="specula-remote-cancel", daemon=True).start()

    def release(self) -> None:
        """The request is over: forget its socket (closed by now) and end a follow()."""
        with self._lock:
            self._socket = None
        self._released.set()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)
