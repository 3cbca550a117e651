"""Answers from a remote OpenAI-compatible server, streamed on a Python thread of their own.

Threading contract: `answer`, `stop` and `shutdown` are called on the GUI thread; each answer's
stream is read on its own daemon thread (never the GUI thread, never the engine thread, so the
local model stays free meanwhile), which touches nothing but the stream and emits this object's
signals. The signals are queued to the receivers on the GUI thread, in the order emitted, and have
the shapes of EngineWorker's, so AnswerController handles a remote answer as a local one.

Request ids count from REMOTE_REQUEST_IDS, far above EngineHost's (which count from 1 and would
need a billion answers to reach it): one slot can take both kinds of events without a collision.

Stop closes the stream's connection at once (ChatStream.close from this thread), so the server
sees the client go and stops generating; the answer then ends as CANCELLED with what had arrived.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from PySide6.QtCore import QObject, Signal

from engine import AnswerStats, DoneEvent, FinishReason
from engine.config import ChatMessage, SamplingParams, TokenSource
from engine.errors import user_message
from engine.remote import ChatStream, ReasoningDelta, RemoteDone, RemoteError, RemoteServer, TextDelta

REMOTE_REQUEST_IDS = 1_000_000_000  # the first remote request id; EngineHost's count from 1
SHUTDOWN_WAIT_S = 2.0  # how long closing the app waits for the streams' threads after closing them
FINISH_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "cancelled": FinishReason.CANCELLED}
CUT_OFF = "The answer was cut off: "


def is_remote_request(request_id: int) -> bool:
    return request_id >= REMOTE_REQUEST_IDS


def server_host(server: RemoteServer) -> str:
    """The server's host name or address, for "remote · host" labels."""
    return urlsplit(server.base_url).hostname or server.where


@dataclass
class _Running:
    stream: ChatStream
    thread: threading.Thread


class RemoteAnswers(QObject):
    """One remote answer at a time (a new one stops the one before), each on its own thread."""

    token_received = Signal(int, str, str, int, bool)  # request id, text, source ("target"), round (0), thinking
    answer_finished = Signal(int, object)  # request id, DoneEvent
    answer_failed = Signal(int, str)  # request id, the user's message: it ended without a DoneEvent

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._ids = itertools.count(REMOTE_REQUEST_IDS)
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}

    @property
    def running(self) -> list[int]:
        """The request ids whose threads have not ended yet."""
        with self._lock:
            return [rid for rid, run in self._running.items() if run.thread.is_alive()]

    def answer(
        self, server: RemoteServer, model: str, messages: list[ChatMessage], sampling: SamplingParams | None
    ) -> int:
        """Start streaming model's answer to messages from server; its request id at once.

        The server is this answer's from now on: it is closed when the answer ends.
        """
        for request_id in self.running:
            self.stop(request_id)
        request_id = next(self._ids)
        stream = server.chat(model, messages, sampling)
        thread = threading.Thread(
            target=self._run, args=(request_id, server, stream), name=f"remote-answer-{request_id}", daemon=True
        )
        with self._lock:
            self._running[request_id] = _Running(stream, thread)
        thread.start()
        return request_id

    def stop(self, request_id: int | None = None) -> None:
        """Close that answer's stream (None: every one) now; its end arrives as CANCELLED."""
        with self._lock:
            runs = [run for rid, run in self._running.items() if request_id is None or rid == request_id]
        for run in runs:
            run.stream.close()

    def shutdown(self, wait_s: float = SHUTDOWN_WAIT_S) -> bool:
        """Stop every answer and wait for their threads, wait_s in all at most (the threads are
        daemons: one that does not end in time cannot keep the app from closing). True when all ended."""
        self.stop()
        deadline = time.monotonic() + wait_s
        with self._lock:
            threads = [run.thread for run in self._running.values()]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    # -- on the answer's own thread --------------------------------------------------------------

    def _run(self, request_id: int, server: RemoteServer, stream: ChatStream) -> None:
        started = time.perf_counter()
        first: float | None = None
        n_text = n_reasoning = 0
        try:
            for event in stream:
                match event:
                    case TextDelta(text) | ReasoningDelta(text):
                        thinking = isinstance(event, ReasoningDelta)
                        n_reasoning += thinking
                        n_text += not thinking
                        first = first if first is not None else time.perf_counter()
                        self._emit(self.token_received, request_id, text, TokenSource.TARGET.value, 0, thinking)
                    case RemoteDone() as done:
                        end = time.perf_counter()
                        gen_s = end - first if first is not None else end - started
                        stats = remote_stats(done, server_host(server), n_text, n_reasoning, gen_s)
                        self._emit(self.answer_finished, request_id, done_event(done, stats))
        except RemoteError as e:
            cut = bool(e.partial_text or e.partial_reasoning)
            self._emit(self.answer_failed, request_id, (CUT_OFF if cut else "") + user_message(e))
        except Exception as e:  # noqa: BLE001 - the thread must always answer; the error is shown, not lost
            self._emit(self.answer_failed, request_id, user_message(e))
        finally:
            server.close()
            with self._lock:
                self._running.pop(request_id, None)

    @staticmethod
    def _emit(signal, *args) -> None:
        with contextlib.suppress(RuntimeError):  # this object is gone: the app closed as the stream ended
            signal.emit(*args)


def remote_stats(done: RemoteDone, host: str, n_text: int, n_reasoning: int, gen_s: float) -> AnswerStats:
    """An answer's statistics from what the server and this client measured (no rounds: a remote
    server does not report them). n_tokens: the server's count, else the pieces streamed."""
    f = done.figures
    usage = done.usage
    stats = AnswerStats(
        n_tokens=usage.completion_tokens if usage else n_text + n_reasoning,
        n_reasoning_tokens=n_reasoning,
        n_prompt_tokens=usage.prompt_tokens if usage else 0,
        gen_s=max(gen_s, 0.0),
        ttft_s=f.client_ttft_s or 0.0,
        backend=f"remote · {host}",
        tokens_by_source={TokenSource.TARGET.value: n_text} if n_text else {},
    )
    if usage:
        cached = usage.cached_tokens or 0
        stats.n_prompt_evaluated = max(usage.prompt_tokens - cached, 0)
    stats.remote = {
        "source": f.source.value,
        "n_drafted": f.n_drafted,
        "n_accepted": f.n_accepted,
        "acceptance_rate": f.acceptance_rate,
        "server_tps": f.server_tps,
        "client_tps": f.client_tps,
        "client_ttft_s": f.client_ttft_s,
        "note": f.note,
        "host": host,
    }
    return stats


def done_event(done: RemoteDone, stats: AnswerStats) -> DoneEvent:
    reason = FINISH_REASONS.get(done.finish_reason, FinishReason.STOP)  # others ("tool_calls"…) ended it cleanly
    return DoneEvent(reason, stats, done.text, reasoning=done.reasoning)
