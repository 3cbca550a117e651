"""The engine's thread: one long-lived QThread owns the Engine; the GUI talks to it by signals.

EngineHost (GUI thread) starts the thread, moves an EngineWorker onto it, and connects its
`*_requested` signals to the worker's slots with queued connections, so every request runs on
the worker thread, in order. The GUI never waits on the worker, except when it shuts it down.

Every answer takes one path: it joins the engine thread's line (EngineHost.queue, engine.serving's
FairQueue), which hands each job to the worker as a queued `job_requested`. While the local server
runs, its clients wait in the same line, first come first served (app.bridge.local_server); when
it does not, the app's answers are alone in it. Either way an answer has a ticket and a cancel
flag, and ends in answer_finished or answer_failed.

What crosses between the threads, and why each is needed:

- Queued signals, both ways: requests to the worker (`*_requested`, run in the order asked), and
  what happened, back to the GUI thread (the worker's signals). Only the engine thread touches the Engine.
- The FairQueue: orders the jobs that compete for the engine (the app's answers, the server's
  requests), counts who waits and refuses server clients past the limit. Its bookkeeping holds a
  lock for a moment; it never waits for a job.
- threading.Event flags, set by the GUI thread and read by the engine between steps: a queued
  "stop" slot could not run while the worker is busy in the loop it should stop. One per answer
  (its ticket's cancel: stopped within one decode step, or skipped while it waits), per load
  (within one tensor), per starter assembly (within one chunk), per token count (a newer one
  supersedes it), and the worker's `closing` (shutdown: requests still queued are skipped).

The local server adds two of its own: its clients' events reach asyncio by
loop.call_soon_threadsafe (engine.serving.generation), and the queue's and the request log's
listeners, called on whichever thread changed them, only emit signals (app.bridge.local_server).
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import threading
import weakref
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from engine import DoneEvent, RoundEvent, TokenEvent, ToolSpec
from engine.config import ChatMessage, ModelSpec, SamplingParams, SpecParams
from engine.documents import chosen, grounding
from engine.documents.library import Library, LibraryError
from engine.errors import ContextFullError, IncompatibleDraftError, OperationCancelled, user_message
from engine.paths import auto_memory_file as default_auto_memory_file
from engine.paths import documents_dir as default_documents_dir
from engine.paths import history_dir as default_history_dir
from engine.serving.fair_queue import FairQueue, Ticket

log = logging.getLogger(__name__)

# How long closing waits for the engine thread once everything on it was told to stop. Cancelled
# work ends within a tensor, a chunk or a decode step (well under a second); this bounds the rest.
SHUTDOWN_WAIT_S = 5.0

# The passages sent to a remote engine, in characters (about 2,000 tokens): its model's tokenizer and
# context are not known here, and every model served for chat has room for that beside a question.
REMOTE_PASSAGE_CHARS = 8_000

# Every engine thread ever started, so tests (and shutdown) can check none is left running.
_threads: weakref.WeakSet[QThread] = weakref.WeakSet()


def running_threads() -> list[QThread]:
    return [t for t in list(_threads) if _alive(t) and t.isRunning()]


def _alive(obj) -> bool:
    try:
        import shiboken6

        return shiboken6.isValid(obj)
    except ImportError:  # pragma: no cover
        return True


class RequestPurpose(str, Enum):
    """Why an answer is asked. A str Enum, so it compares (and prints) as its value."""

    ANSWER = "answer"  # the user's: shown and stored
    COMPARE = "compare"  # a plain-decoding rerun of a stored answer, to measure its speed-up


@dataclass
class AnswerRequest:
    """One answer to produce.

    remember: the conversation's id, to add the question and its finished answer to the history
    index (None: not the user's history, e.g. a comparison rerun, or history drafting is off).
    """

    id: int
    messages: list[ChatMessage]
    sampling: SamplingParams
    spec: SpecParams
    purpose: RequestPurpose = RequestPurpose.ANSWER
    cancel: threading.Event = field(default_factory=threading.Event)
    ticket: Ticket | None = None  # its place in the engine thread's line
    remember: int | None = None
    collections: tuple[str, ...] = ()  # document collections to ground the last message in (engine.documents)
    tools: tuple[ToolSpec, ...] = ()  # functions the model may call (MCP servers' tools), under the tool grammar


@dataclass
class CountRequest:
    """Count the prompt tokens of a conversation (the message being typed last) for the context meter."""

    id: int
    messages: list[ChatMessage]
    max_tokens: int  # the answer's token limit: with the context size, how much room it keeps
    superseded: threading.Event = field(default_factory=threading.Event)  # set: a newer count was asked
    collections: tuple[str, ...] = ()  # the chat's document collections: the passages sending would add count too
    tools: tuple[ToolSpec, ...] = ()  # the tools the chat offers: their descriptions are in the prompt too


@dataclass(frozen=True)
class TokenCount:
    """The engine's answer to a CountRequest. n_ctx 0: no model is loaded (nothing was counted)."""

    id: int
    n_tokens: int = 0
    n_ctx: int = 0
    room: int = 0  # kept free for the answer
    n_dropped: int = 0  # the oldest messages sending would drop to fit
    too_long: str = ""  # the last message does not fit even alone: why
    error: str = ""
    n_documents: int = 0  # of n_tokens, the passages of the user's documents sending would put before the message
    n_tools: int = 0  # of n_tokens, the descriptions of the tools the chat offers
    n_results_cut: int = 0  # tool results whose middle sending would leave out (engine.decoding.fitting)


class EngineWorker(QObject):
    """Owns the Engine. Runs on the engine thread: never touch widgets here, only emit signals."""

    load_progress = Signal(str, float)  # stage, fraction
    loaded = Signal(object)  # EngineInfo
    chat_format_known = Signal(object)  # ChatFormatInfo: after each load and each template change
    unloaded = Signal()
    token_received = Signal(int, str, str, int, bool)  # request id, text, source, round index, thinking
    round_finished = Signal(int, object)  # request id, RoundEvent
    answer_finished = Signal(int, object)  # request id, DoneEvent
    # Failures, one signal per operation (each carries a message for the user).
    load_failed = Signal(str)  # no model is loaded now
    draft_refused = Signal(str)  # the draft was left out (incompatible); the target loads alone
    answer_failed = Signal(int, str)  # request id: it ended without a DoneEvent
    starter_failed = Signal(str)
    cancelled = Signal(str)  # operation ("load", "starter"): stopped on request, nothing left half-done
    starter_progress = Signal(int, int)  # bytes done, total
    starter_finished = Signal(str, str)  # target path, draft path
    tokens_counted = Signal(object)  # TokenCount, for the newest CountRequest only
    history_forgotten = Signal(object)  # the conversation id (None: all of it), once gone from memory and disk
    sources_found = Signal(int, object)  # request id, [Hit]: the passages its last message was given, first
    # request id, why its collections could not be searched (it is answered without them)
    documents_failed = Signal(int, str)
    # request id, how the reordering of the passages found goes while the answer waits for it ("" once the
    # search is done): seconds on a CPU
    documents_progress = Signal(int, str)
    # request id, the messages with the last one grounded (unchanged when nothing could be searched):
    # the passages for a remote engine's answer (EngineHost.ground_for_remote), after sources_found
    grounded_for_remote = Signal(int, object)

    def __init__(self, history_dir: Path | None = None, memory_file: Path | None = None):
        """history_dir: the user's history indexes (engine.paths.history_dir()); None: no history at all.
        memory_file: what auto learned of each model pair (engine.paths.auto_memory_file()); None: not kept."""
        super().__init__()
        self.engine = None
        self.library: Library | None = None  # the document library, opened on this thread when first asked
        # Its embedding and reranking models, loaded on this thread when a search first needs them.
        self.embedding_model, self.reranking_model = chosen.embedding_model(), chosen.reranking_model()
        self.history_dir = history_dir
        self.memory_file = memory_file
        # Set by EngineHost.shutdown (any thread): requests still queued are skipped.
        self.closing = threading.Event()

    @property
    def _kept(self) -> dict:
        """Where the engine keeps what outlives it: the history index and auto's memory."""
        return {"history_dir": self.history_dir, "memory_file": self.memory_file}

    @Slot(object, object, object)
    def load(self, target: ModelSpec | None, draft: ModelSpec | None, cancel: threading.Event) -> None:
        self._close_engine()
        if target is None or self.closing.is_set():
            return
        try:
            from engine import Engine

            progress = self.load_progress.emit
            try:
                self.engine = Engine(target, draft, progress=progress, cancel=cancel, **self._kept)
            except IncompatibleDraftError as e:
                # Keep working with the target alone, and say why the draft was left out.
                self.draft_refused.emit(user_message(e))
                self.engine = Engine(target, None, progress=progress, cancel=cancel, **self._kept)
            self.loaded.emit(self.engine.info)
        except OperationCancelled:
            log.info("loading cancelled")
            self.engine = None
            self.cancelled.emit("load")
        except Exception as e:  # noqa: BLE001 - every failure becomes a message, never a dead thread
            log.exception("loading failed")
            self.engine = None
            self.load_failed.emit(user_message(e))

    @Slot(object)
    def set_chat_template(self, override: str | None) -> None:
        """Format with a preset name or Jinja text (None: the model's own way); queued after each load."""
        if self.engine is None or self.closing.is_set():
            return
        self.engine.set_chat_template(override)
        self.chat_format_known.emit(self.engine.formatter.summary)

    @Slot(object)
    def answer(self, request: AnswerRequest) -> None:
        if self.closing.is_set():
            return
        if self.engine is None:
            self.answer_failed.emit(
                request.id, "No model is loaded.\nChoose a model in Settings, or fix the error shown above."
            )
            return
        round_index = -1
        done = None
        try:
            messages, grounded = self._grounded(request) if request.collections else (request.messages, None)
            events = self.engine.chat(
                messages,
                request.sampling,
                request.spec,
                request.cancel,
                remember=request.remember,
                documents=grounded.draft_texts if grounded else (),
                collections=grounded.whole if grounded else None,
                tools=request.tools,
                tool_grammar=bool(request.tools),
                cut_tool_results=True,  # a file read back that does not fit loses its middle, not the answer
            )
            for event in events:
                if isinstance(event, TokenEvent) and event.tool_call:
                    continue  # a call's markup: the DoneEvent lists the call, the window shows it as a tool block
                if isinstance(event, TokenEvent):
                    self.token_received.emit(
                        request.id, event.text, event.source.value, max(round_index, 0), event.reasoning
                    )
                elif isinstance(event, RoundEvent):
                    round_index += 1
                    self.round_finished.emit(request.id, event)
                elif isinstance(event, DoneEvent):
                    done = event
        except Exception as e:  # noqa: BLE001 - llama-cpp-python raises RuntimeError; keep the thread alive
            log.exception("answer failed")
            self.answer_failed.emit(request.id, user_message(e))
            return
        if done is None:  # the engine promises a DoneEvent; say so rather than hang the GUI
            self.answer_failed.emit(request.id, "The engine ended the answer without a result. Try again.")
            return
        self.answer_finished.emit(request.id, done)

    def _grounded(self, request: AnswerRequest) -> tuple[list[ChatMessage], grounding.Grounded | None]:
        """The request's messages with the last one grounded in the best passages of its collections that fit
        the context (sources_found says which), and the grounding (what to draft from: the passages found
        and the collections' whole text); unchanged and None, with documents_failed, if they cannot be searched."""
        fits = self._fits_context(request.messages, request.sampling.max_tokens, request.tools)
        return self._search(request.id, request.messages, request.collections, fits, request.cancel)

    def ground_for_remote(self, request_id: int, messages: list[ChatMessage], collections: tuple[str, ...]) -> None:
        """Find the passages for a remote engine's answer (the user allowed it for the chat), as many as
        REMOTE_PASSAGE_CHARS hold: this computer has not the remote model's tokenizer or context to count
        with. grounded_for_remote carries the messages to send (the question alone if nothing could be searched)."""
        if self.closing.is_set():
            return
        budget = len(messages[-1].content) + REMOTE_PASSAGE_CHARS
        grounded, _ = self._search(request_id, messages, collections, lambda text: len(text) <= budget)
        self.grounded_for_remote.emit(request_id, grounded)

    def _search(self, request_id: int, messages: list[ChatMessage], collections: tuple[str, ...], fits, cancel=None):
        """_ground, with sources_found or documents_failed said for request_id (cancel: the answer's Stop)."""
        try:
            grounded_messages, grounded = self._ground(
                messages,
                collections,
                fits,
                cancel,
                progress=lambda text: self.documents_progress.emit(request_id, text),
            )
        except (LibraryError, OSError, sqlite3.Error) as e:
            log.warning("documents not searched: %s", e)
            self.documents_failed.emit(request_id, f"Your documents were not searched: {e}")
            return messages, None
        finally:
            self.documents_progress.emit(request_id, "")
        self.sources_found.emit(request_id, grounded.sources)
        return grounded_messages, grounded

    def _fits_context(self, messages: list[ChatMessage], max_tokens: int, tools: tuple[ToolSpec, ...] = ()):
        """Whether a text as the last message fits the loaded model's context beside the tools offered,
        room for the answer kept."""
        *before, last = messages
        return lambda text: self.engine.fits([*before, ChatMessage(last.role, text)], max_tokens, tools)

    def _ground(
        self, messages: list[ChatMessage], collections: tuple[str, ...], fits, cancel=None, rerank=True, progress=None
    ):
        """(messages with the last one grounded in the passages that fit, grounding.Grounded); LibraryError
        and the like when the collections cannot be searched (a notice says so if the embedding model
        cannot be loaded). progress(text): what the search is doing, while the passages are reordered."""
        *before, last = messages
        if self.library is None:
            self.library = Library(default_documents_dir())
        names = [c.name for c in self.library.collections()]
        if missing := [n for n in collections if n not in names]:
            raise LibraryError(f"There is no collection named {', '.join(map(repr, missing))} any more.")
        embedder = self.embedding_model.get(
            self.library,
            lambda e: self.documents_failed.emit(0, f"Keyword search only: the embedding model cannot be used: {e}"),
        )
        reranker = self._reranker() if rerank else None
        if reranker is not None:
            reranker.set_cancel(cancel)  # Stop ends a reranking (seconds on a CPU) too
            reranker.set_progress(
                None
                if progress is None
                else lambda done, total: progress(f"Reordering the passages found: {done} of {total}…")
            )
        grounded = grounding.find_and_ground(self.library, list(collections), last.content, fits, embedder, reranker)
        if reranker is not None and reranker.failure is not None:
            self.documents_failed.emit(0, f"Passages in the search's order: reranking failed: {reranker.failure}")
        return [*before, ChatMessage(last.role, grounded.message, last.reasoning)], grounded

    def _reranker(self):
        """The library's reranking model, loaded on this thread at first use; None when none is chosen
        or it cannot be loaded (documents_failed says why, once)."""
        return self.reranking_model.get(
            self.library,
            lambda e: self.documents_failed.emit(
                0, f"Passages in the search's order: the reranking model cannot be used: {e}"
            ),
        )

    @Slot(object)
    def count_tokens(self, request: CountRequest) -> None:
        """Exact prompt tokens (the model's tokenizer and chat template), and what sending would drop to fit."""
        if self.closing.is_set() or request.superseded.is_set():
            return
        if self.engine is None:
            self.tokens_counted.emit(TokenCount(request.id))
            return
        engine = self.engine
        try:
            messages, tools, n_documents = request.messages, request.tools, 0
            if request.collections and messages and messages[-1].role == "user":
                try:
                    fits = self._fits_context(messages, request.max_tokens, tools)
                    # Not reranked: seconds a count on a CPU, for an order that barely moves the count.
                    grounded, _ = self._ground(messages, request.collections, fits, rerank=False)
                    n_documents = len(engine.prompt_tokens(grounded)) - len(engine.prompt_tokens(messages))
                    messages = grounded
                except (LibraryError, OSError, sqlite3.Error):
                    pass  # counted without them; sending says why
            without_tools = len(engine.prompt_tokens(messages))
            n_tokens = len(engine.prompt_tokens(messages, tools)) if tools else without_tools
            n_ctx, room = engine.target.n_ctx, engine.answer_room(request.max_tokens)
            dropped, cut, too_long = 0, 0, ""
            if n_tokens + room > n_ctx:
                try:
                    fitted = engine.fit_conversation(messages, request.max_tokens, tools, cut_tool_results=True)
                    dropped, cut = fitted.dropped, fitted.results_cut
                except ContextFullError as e:
                    too_long = user_message(e)
        except Exception as e:  # noqa: BLE001 - a failed count must not end the thread
            log.exception("counting tokens failed")
            self.tokens_counted.emit(TokenCount(request.id, error=user_message(e)))
            return
        self.tokens_counted.emit(
            TokenCount(
                request.id,
                n_tokens,
                n_ctx,
                room,
                dropped,
                too_long,
                n_documents=n_documents,
                n_tools=n_tokens - without_tools,
                n_results_cut=cut,
            )
        )

    @Slot(object)
    def forget_history(self, conversation_id: int | None) -> None:
        """Remove a conversation from every vocabulary's history index (None: erase them all), in the
        loaded engine's memory too. Runs even while closing: what the user deleted must go."""
        if self.history_dir is None:
            return
        try:
            if self.engine is not None:
                self.engine.forget_history(conversation_id)
            else:
                from engine.history.store import erase_everywhere, forget_everywhere

                if conversation_id is None:
                    erase_everywhere(self.history_dir)
                else:
                    forget_everywhere(self.history_dir, conversation_id)
        except Exception:  # noqa: BLE001 - a damaged or unwritable index must not end the thread
            log.exception("forgetting history (conversation %s) failed", conversation_id)
            return
        self.history_forgotten.emit(conversation_id)

    @Slot(object)
    def run_job(self, job) -> None:
        """Run job() here, on the engine thread: EngineHost.dispatch's, such as the turns the line
        hands out (an answer of the app's, a request of the local server's); a job reads self.engine itself."""
        job()

    @Slot(object)
    def assemble_starter(self, cancel: threading.Event) -> None:
        if self.closing.is_set():
            return
        try:
            from engine.models import starter

            target, draft = starter.assemble_pair(progress=self.starter_progress.emit, cancel=cancel)
            self.starter_finished.emit(str(target), str(draft))
        except OperationCancelled:
            log.info("starter assembly cancelled; its partial file was deleted")
            self.cancelled.emit("starter")
        except Exception as e:  # noqa: BLE001
            log.exception("starter assembly failed")
            self.starter_failed.emit(user_message(e))

    @Slot()
    def shutdown(self) -> None:
        self.close_engine()

    def close_engine(self) -> None:
        """Free the models (and the document library). Only from the engine thread, or once that thread has finished."""
        self._close_engine()
        if self.library is not None:
            self.library.close()
            self.library = None
        self.embedding_model.close()
        self.reranking_model.close()

    def _close_engine(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
            self.unloaded.emit()


class EngineHost(QObject):
    """The GUI thread's handle on the engine thread."""

    load_requested = Signal(object, object, object)
    chat_template_requested = Signal(object)
    starter_requested = Signal(object)
    job_requested = Signal(object)  # a callable for the engine thread (EngineHost.dispatch)
    count_requested = Signal(object)  # CountRequest
    forget_history_requested = Signal(object)  # a conversation id, or None: all
    shutdown_requested = Signal()

    def __init__(self, parent: QObject | None = None, history_dir: Path | None = None):
        """history_dir: the user's history indexes; None: the data folder's (engine.paths.history_dir())."""
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._count_ids = itertools.count(1)
        self._pending: dict[int, AnswerRequest] = {}
        # The cancel flags of the newest load and starter assembly (set: stop it).
        self.load_cancel = threading.Event()
        self.starter_cancel = threading.Event()
        self._count_superseded = threading.Event()  # the newest CountRequest's
        self.stuck = False  # shutdown gave up waiting: native code may still run on the thread
        # The engine thread's line: every answer waits its turn here, and the local server's
        # requests too while it runs (first come, first served).
        self.queue = FairQueue(self.dispatch)
        self.thread = QThread()
        self.thread.setObjectName("specula-engine")
        self.worker = EngineWorker(
            history_dir if history_dir is not None else default_history_dir(), default_auto_memory_file()
        )
        self.worker.moveToThread(self.thread)
        queued = Qt.ConnectionType.QueuedConnection
        self.load_requested.connect(self.worker.load, queued)
        self.chat_template_requested.connect(self.worker.set_chat_template, queued)
        self.starter_requested.connect(self.worker.assemble_starter, queued)
        self.job_requested.connect(self.worker.run_job, queued)
        self.count_requested.connect(self.worker.count_tokens, queued)
        self.forget_history_requested.connect(self.worker.forget_history, queued)
        self.shutdown_requested.connect(self.worker.shutdown, queued)
        self.worker.answer_finished.connect(self._forget)
        self.worker.answer_failed.connect(self._forget)
        _threads.add(self.thread)
        self.thread.start()

    def load(self, target: ModelSpec | None, draft: ModelSpec | None, chat_template: str | None = None) -> None:
        """Load (or unload, with target None); a load still running for an older request is abandoned.

        chat_template: the user's override for this model (a preset name or Jinja text), or None.
        """
        self.load_cancel.set()
        self.load_cancel = threading.Event()
        self.load_requested.emit(target, draft, self.load_cancel)
        self.chat_template_requested.emit(chat_template)

    def set_chat_template(self, chat_template: str | None) -> None:
        """Change the loaded model's chat format (answers requested after this use it)."""
        self.chat_template_requested.emit(chat_template)

    def answer(
        self,
        messages: list[ChatMessage],
        sampling: SamplingParams,
        spec: SpecParams,
        purpose: RequestPurpose = RequestPurpose.ANSWER,
        remember: int | None = None,
        collections: tuple[str, ...] = (),
        tools: tuple[ToolSpec, ...] = (),
    ) -> AnswerRequest:
        """Put an answer in the engine thread's line; it ends in worker.answer_finished or answer_failed.

        It is never refused, and waits behind the local server's requests that came first. Stopping
        it while it waits makes its turn end at once (the engine sees the cancel flag), so its end
        arrives as usual. remember: the conversation's id, to add this answer to the history index
        (None: not added). collections: ground the last message in these document collections
        (worker.sources_found, before its tokens). tools: functions the model may call; its calls end the
        answer with FinishReason.TOOL_CALLS (their markup is not sent as tokens).
        """
        request = AnswerRequest(
            next(self._ids),
            list(messages),
            sampling,
            spec,
            RequestPurpose(purpose),
            remember=remember,
            collections=tuple(collections),
            tools=tuple(tools),
        )
        self._pending[request.id] = request
        request.ticket = self.queue.submit(
            "app", lambda _ticket: self.worker.answer(request), limited=False, cancel=request.cancel
        )
        return request

    def count_tokens(
        self,
        messages: list[ChatMessage],
        max_tokens: int,
        collections: tuple[str, ...] = (),
        tools: tuple[ToolSpec, ...] = (),
    ) -> int:
        """Ask for the conversation's prompt tokens; the answer comes as worker.tokens_counted with this id.
        Only the newest request is answered: one asked while the engine is busy waits for it, and replaces
        those still waiting. collections: the passages sending would add to the last message count too;
        tools: the descriptions of the tools the chat offers, too."""
        self._count_superseded.set()
        self._count_superseded = threading.Event()
        request = CountRequest(
            next(self._count_ids), list(messages), max_tokens, self._count_superseded, tuple(collections), tuple(tools)
        )
        self.count_requested.emit(request)
        return request.id

    def forget_history(self, conversation_id: int | None) -> None:
        """Remove a conversation's tokens from the history indexes (None: erase them all), on the engine
        thread after what was asked before; worker.history_forgotten says when it is done."""
        self.forget_history_requested.emit(conversation_id)

    def ground_for_remote(self, messages: list[ChatMessage], collections: tuple[str, ...]) -> int:
        """Search the collections for a remote engine's answer, on the engine thread after what was asked
        before; its id at once. worker.sources_found and then worker.grounded_for_remote come with it."""
        request_id = next(self._ids)
        messages = list(messages)
        self.dispatch(lambda: self.worker.ground_for_remote(request_id, messages, tuple(collections)))
        return request_id

    def dispatch(self, job) -> None:
        """Run job() on the engine thread, after what was asked before (a FairQueue's dispatch)."""
        self.job_requested.emit(job)

    def stop(self, request_id: int | None = None) -> None:
        """Stop one answer (or all): takes effect within one decode step. Safe to call any time."""
        for rid, request in list(self._pending.items()):
            if request_id is None or rid == request_id:
                request.cancel.set()

    def assemble_starter(self) -> None:
        self.starter_cancel = threading.Event()
        self.starter_requested.emit(self.starter_cancel)

    def shutdown(self, wait_s: float | None = None) -> bool:
        """Cancel what runs (answer, load, starter assembly), free the models, end the thread.

        Blocks at most wait_s (SHUTDOWN_WAIT_S) seconds. Returns True when the thread has ended;
        False when it is still inside a native call that could not be interrupted: then it is
        left to finish (sets .stuck), and the caller must end the process without tearing Qt and
        Python down around it (app/main.py does), since freeing its objects would crash.
        """
        if not self.thread.isRunning():
            return True
        self.worker.closing.set()  # requests still queued are skipped
        self.stop()
        self.load_cancel.set()
        self.starter_cancel.set()
        self.shutdown_requested.emit()
        self.thread.quit()
        wait_s = SHUTDOWN_WAIT_S if wait_s is None else wait_s
        if not self.thread.wait(max(int(wait_s * 1000), 1)):
            self.stuck = True
            log.warning(
                "The engine thread did not stop within %.0f s of being cancelled (a native call that cannot be "
                "interrupted); it is left running and the process will exit without waiting for it.",
                wait_s,
            )
            return False
        # The thread has ended: nothing runs on it, so the models can be freed from here. (The queued
        # shutdown slot may not have run: a thread's event loop stops before events posted late.)
        self.worker.close_engine()
        return True

    def _forget(self, request_id: int, _result=None) -> None:
        """The answer ended (its DoneEvent or its failure message): its cancel flag is no longer needed."""
        self._pending.pop(request_id, None)
