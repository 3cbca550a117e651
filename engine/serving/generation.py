"""A request run on the engine's thread, its events carried to the async side that answers it.

The engine is blocking and belongs to one thread; the HTTP side is asyncio. EngineService.start
puts a job in the FairQueue; the job runs Engine.chat / Engine.complete on the engine's thread
with the ticket's cancel event, and hands each TokenEvent and the DoneEvent to an EventBridge,
which wakes the request's coroutine through loop.call_soon_threadsafe (the engine never waits on
a slow client). Setting ticket.cancel (a client gone, the server stopping) ends the answer within
one decode step, or skips it while it still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine import (
    ChatMessage,
    DoneEvent,
    FinishReason,
    MalformedToolCallEvent,
    SamplingParams,
    SpecParams,
    TokenEvent,
    ToolCallEvent,
)
from engine.documents.library import LibraryError
from engine.errors import user_message
from engine.serving.documents import Documents
from engine.serving.fair_queue import FairQueue, Ticket
from engine.serving.request_log import RequestLog, RequestRecord
from engine.tools import ToolChoice, ToolSpec

if TYPE_CHECKING:  # the name only: importing Engine loads llama.cpp, which the app's start need not wait for
    from engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Generation:
    """What one request asks of the engine: a chat (messages), or a raw completion of prompt."""

    messages: tuple[ChatMessage, ...] | None
    prompt: str
    sampling: SamplingParams
    spec: SpecParams
    collections: tuple[str, ...] = ()  # the last user message is grounded in these (engine.serving.documents)
    tools: tuple[ToolSpec, ...] = ()  # functions the model may call (Engine.chat's tools)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True  # False: only the first call of an answer is returned


@dataclass(frozen=True)
class Failed:
    """The engine could not answer; message says why (for the client)."""

    message: str
    status: int = 500


def http_status(done: DoneEvent) -> int:
    """The status of a finished answer: a prompt that does not fit is the client's to fix (400)."""
    if done.finish_reason == FinishReason.ERROR:
        return 500
    if done.finish_reason == FinishReason.CONTEXT and done.error and not done.stats.n_tokens:
        return 400
    return 200


class EventBridge:
    """Items from the engine's thread to one coroutine, in order: a Grounding first when the question
    was grounded in documents, then TokenEvents (and ToolCallEvents, MalformedToolCallEvents) and a
    DoneEvent, or Failed."""

    _END = object()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()

    def put(self, item) -> None:
        # RuntimeError: the event loop has closed (the server stopped) and nobody listens.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def close(self) -> None:
        self.put(self._END)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self._queue.get()
        if item is self._END:
            raise StopAsyncIteration
        return item


class EngineService:
    """Runs Generations on one engine through a FairQueue, and records each in the RequestLog.

    engine: returns the engine to use when the job runs (the app may reload its model between
    requests), or None when no model is loaded. documents: the library a request's collections
    are read from (None: the data folder's).
    """

    def __init__(
        self,
        engine: Callable[[], Engine | None],
        queue: FairQueue,
        request_log: RequestLog,
        documents: Documents | None = None,
    ):
        self._engine = engine
        self.queue = queue
        self.log = request_log
        self.documents = documents or Documents()

    def start(
        self, generation: Generation, record: RequestRecord, loop: asyncio.AbstractEventLoop
    ) -> tuple[Ticket, EventBridge]:
        """Queue the generation (raises QueueFull); its events arrive on the returned bridge."""
        bridge = EventBridge(loop)
        label = f"#{record.id} {record.path}"
        ticket = self.queue.submit(label, lambda t: self._run(generation, record, t, bridge), owner=self)
        return ticket, bridge

    def cancel_all(self) -> None:
        """Stop this service's requests, running or waiting (not others in the same queue)."""
        self.queue.cancel_all(owner=self)

    def _run(self, generation: Generation, record: RequestRecord, ticket: Ticket, bridge: EventBridge) -> None:
        """On the engine's thread: answer, pass the events on, and finish the record (even when nobody listens)."""
        record.t_started = time.time()
        record.queue_wait_s = ticket.queue_wait_s
        record.max_tokens = generation.sampling.max_tokens
        finish, status, error = "cancelled", None, ""
        try:
            if ticket.cancel.is_set():
                return  # the client left (or the server stopped) while it waited
            engine = self._engine()
            if engine is None:
                finish, status, error = "error", 503, "No model is loaded."
                bridge.put(Failed(error, 503))
                return
            if generation.messages is not None:
                messages, grounding = list(generation.messages), None
                if generation.collections:
                    messages, grounding = self.documents.ground(
                        engine,
                        messages,
                        generation.collections,
                        generation.sampling.max_tokens,
                        generation.tools,
                        generation.tool_choice,
                    )
                    record.n_passages = len(grounding.sources)
                    bridge.put(grounding)
                events = engine.chat(
                    messages,
                    generation.sampling,
                    generation.spec,
                    ticket.cancel,
                    documents=grounding.drafts if grounding else (),
                    collections=grounding.whole if grounding else None,
                    tools=generation.tools,
                    tool_choice=generation.tool_choice,
                    # Calls are held to the tools' schemas by a grammar where the family has one: from the first
                    # token for required or a named function, from where a call opens for auto (as in the app).
                    tool_grammar=bool(generation.tools),
                    parallel_tool_calls=generation.parallel_tool_calls,
                )
            else:
                events = engine.complete(generation.prompt, generation.sampling, generation.spec, ticket.cancel)
            for event in events:
                if isinstance(event, (TokenEvent, ToolCallEvent, MalformedToolCallEvent)):
                    bridge.put(event)
                elif isinstance(event, DoneEvent):
                    _fill(record, event)
                    finish, error = event.finish_reason.value, event.error or ""
                    status = None if record.stream else http_status(event)
                    bridge.put(event)
        except LibraryError as e:  # a collection removed since the request came
            error = str(e)
            finish, status = "error", None if record.stream else 400
            bridge.put(Failed(error, 400))
        except Exception as e:  # noqa: BLE001 - llama-cpp-python raises RuntimeError; the server keeps serving
            log.exception("generation failed")
            error = user_message(e)
            finish, status = "error", None if record.stream else 500
            bridge.put(Failed(error))
        finally:
            bridge.close()
            self.log.finish(record, finish, status, error)


def _fill(record: RequestRecord, done: DoneEvent) -> None:
    s = done.stats
    record.n_prompt_tokens = s.n_prompt_tokens
    record.n_cached_tokens = max(s.n_prompt_tokens - s.n_prompt_evaluated, 0)
    record.n_tokens = s.n_tokens
    record.gen_tps = s.gen_tps
    record.n_drafted, record.n_accepted = s.n_drafted, s.n_accepted
    record.estimated_speedup = s.estimated_speedup
