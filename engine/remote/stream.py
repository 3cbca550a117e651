"""One streamed chat answer: server-sent events in, TextDelta / ReasoningDelta / RemoteDone out.

The chunks' own fields beside OpenAI's are kept (extras) for the figures and for Details; the time
to the first text and the rate after it are measured here with time.perf_counter. An answer is
complete when a finish_reason or `data: [DONE]` arrived; a stream that ends before either is cut.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx2

from engine.remote import faults
from engine.remote.errors import (
    MalformedResponseError,
    RemoteError,
    RequestRefusedError,
    ServerFailedError,
    StreamCutError,
)
from engine.remote.figures import FigureSource, read_figures
from engine.remote.hangup import Hangup
from engine.remote.records import CANCELLED, ReasoningDelta, RemoteDone, RemoteEvent, RemoteUsage, TextDelta

if TYPE_CHECKING:
    from engine.remote.client import RemoteServer

CHUNK_FIELDS = {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier"}
CHOICE_FIELDS = {"index", "delta", "finish_reason", "logprobs"}
STOPPED_NOTE = "Stopped before the server sent its figures; tokens/s and time to first token are measured here."


class ChatStream:
    """A chat answer on its way. Iterate it once, on one thread: TextDelta and ReasoningDelta as
    they come, then one RemoteDone. A failure raises a RemoteError carrying the text so far.

    Stop: close() from any thread, or set the cancel Event given to RemoteServer.chat. The
    connection is shut at once (before the server's first byte too), the server sees the client go
    and stops generating, and the iteration ends with a RemoteDone whose finish_reason is "cancelled".
    """

    def __init__(self, server: RemoteServer, body: dict, cancel: threading.Event | None = None):
        self._server, self._body = server, body
        self._hangup = Hangup()
        if cancel is not None:
            if cancel.is_set():
                self._hangup.stop()
            else:
                self._hangup.follow(cancel)
        self._iterated = False

    def __repr__(self) -> str:
        return f"ChatStream({self._server.where}, model={self._body.get('model')!r})"

    def close(self) -> None:
        self._hangup.stop()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[RemoteEvent]:
        if self._iterated:
            raise RuntimeError("a ChatStream is read once")
        self._iterated = True
        try:
            yield from self._events()
        finally:
            self._hangup.release()

    def _events(self) -> Iterator[RemoteEvent]:
        server, hangup = self._server, self._hangup
        opened = server.open("POST", "/chat/completions", self._body, hangup)
        if opened is None:
            yield _Answer(time.perf_counter(), server.where).done(CANCELLED)
            return
        response, sent_at = opened
        answer = _Answer(sent_at, server.where, server.scrub)
        try:
            kind = response.headers.get("content-type", "")
            if kind.partition(";")[0].strip().lower() != "text/event-stream":
                raise answer.malformed(f"{kind or 'no content type'}, not an event stream")
            for event in httpx2.EventSource(response):
                if hangup.stopped.is_set():
                    break
                data = event.data.strip()
                if data == "[DONE]":
                    answer.complete = True
                    break
                if data:
                    yield from answer.take(data)
        except httpx2.SSEError as e:
            raise answer.malformed(f"an event it could not read ({e})") from e
        except httpx2.TimeoutException:
            if not hangup.stopped.is_set():
                raise faults.timed_out(server.where, server.read_timeout_s, answer.text, answer.reasoning) from None
        except httpx2.TransportError as e:
            if not hangup.stopped.is_set():
                raise answer.cut(f"the connection dropped ({e or type(e).__name__})") from e
        finally:
            response.close()
        if answer.finish_reason or answer.complete:  # whole, even if Stop came as it ended
            yield answer.done(answer.finish_reason or "stop")
        elif hangup.stopped.is_set():
            yield answer.done(CANCELLED)
        else:
            raise answer.cut("the stream ended without a finish reason")


class _Answer:
    """What has arrived so far of one answer."""

    def __init__(self, sent_at: float, where: str, scrub: Callable[[str], str] = str):
        self.sent_at, self.where = sent_at, where
        self.scrub = scrub  # blanks the API key out of a text for a message (str: nothing to blank)
        self.text = self.reasoning = self.model = ""
        self.finish_reason: str | None = None
        self.complete = False  # `data: [DONE]` arrived
        self.usage: RemoteUsage | None = None
        self.extras: dict[str, Any] = {}
        self.n_deltas = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

    def take(self, data: str) -> Iterator[RemoteEvent]:
        try:
            chunk = json.loads(data)
        except ValueError:
            raise self.malformed(f"an event that is not JSON: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise self.malformed(f"an event that is not a JSON object: {data[:80]!r}")
        if chunk.get("error"):
            raise self.error_event(chunk["error"])
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        self.extras.update((k, v) for k, v in chunk.items() if k not in CHUNK_FIELDS)
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"]) or self.usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            if "usage" in chunk:
                return
            raise self.malformed("an event without choices")
        for choice in choices[:1]:  # n = 1: one answer per request
            if not isinstance(choice, dict):
                raise self.malformed("a choice that is not a JSON object")
            self.extras.update((k, v) for k, v in choice.items() if k not in CHOICE_FIELDS)
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.reasoning += thought
                self._arrived()
                yield ReasoningDelta(thought)
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.text += delta["content"]
                self._arrived()
                yield TextDelta(delta["content"])
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]

    def _arrived(self) -> None:
        self.last_at = time.perf_counter()
        self.first_at = self.first_at or self.last_at
        self.n_deltas += 1

    def done(self, finish_reason: str) -> RemoteDone:
        n_tokens = self.usage.completion_tokens if self.usage else self.n_deltas
        ttft = self.first_at - self.sent_at if self.first_at is not None else None
        span = (self.last_at - self.first_at) if self.first_at is not None and self.last_at is not None else 0.0
        tps = (n_tokens - 1) / span if n_tokens > 1 and span > 0 else None
        figures = read_figures(self.extras, ttft, tps)
        if finish_reason == CANCELLED and figures.source == FigureSource.CLIENT:
            figures = replace(figures, note=STOPPED_NOTE)
        return RemoteDone(self.text, self.reasoning, finish_reason, figures, self.usage, self.model, self.extras)

    def partial(self) -> dict[str, str]:
        return {"partial_text": self.text, "partial_reasoning": self.reasoning}

    def cut(self, why: str) -> StreamCutError:
        return StreamCutError(f"The answer from {self.where} was cut off: {why}.", **self.partial())

    def malformed(self, what: str) -> MalformedResponseError:
        return MalformedResponseError(self.scrub(f"{self.where} sent {what}."), **self.partial())

    def error_event(self, error: Any) -> RemoteError:
        """An error sent as an event mid-stream (the status was already 200): the server's message,
        a refusal when it says the request was invalid (a prompt too long), else a failure."""
        message = self.scrub(faults.server_message(json.dumps({"error": error}))) or "no message"
        refused = isinstance(error, dict) and error.get("type") == "invalid_request_error"
        kind = RequestRefusedError if refused else ServerFailedError
        return kind(f"{self.where} stopped the answer with an error: {message}", **self.partial())


def _usage(usage: dict) -> RemoteUsage | None:
    def count(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
    prompt, completion = count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    return RemoteUsage(prompt, completion, cached)
