"""The answer lifecycle: one answer (or one compare-with-plain rerun) at a time, from request to end.

The controller owns the running job, the tick that writes it to the store and refreshes its live
statistics, and the engine's answer signals. It never touches a widget: it emits what the window
shows (tokens of the conversation on screen, busy, the end of an answer, notices), and the window
wires those to its widgets. Tests drive it with a fake EngineHost that emits the worker's signals.

A chat whose target is a remote model ("remote:<engine id>/<model>", app.core.remote_engines) is
answered by that engine's server through RemoteAnswers instead of the EngineHost: its signals have
the worker's shapes and its request ids a range of their own, so both arrive at the same slots and
the answer is recorded the same way. Nothing of it reaches the engine thread or the history index,
except a search of the chat's documents when the user allowed their passages to be sent to that
engine (ChatSettings.documents_to): the passages are found on the engine thread (its embedding
model), and the answer is sent once they are (RemoteStart).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.bridge.host import EngineHostApi
from app.bridge.mcp_service import CallOutcome, McpService
from app.bridge.model_controller import ModelController
from app.bridge.remote_answers import SHUTDOWN_WAIT_S as REMOTE_SHUTDOWN_S
from app.bridge.remote_answers import RemoteAnswers, is_remote_request
from app.bridge.tool_turn import (
    MAX_STEPS,
    TOOL_TIMEOUT_S,
    ApprovalRequest,
    ToolTurn,
    Waiting,
    joined,
    unread_calls_note,
)
from app.bridge.worker import RequestPurpose
from app.core.answers import STORE_WRITE_ERRORS, AnswerRecorder, answer_params, sampling_from_params, write_problem
from app.core.attachments import prompt_text
from app.core.figures import compare_texts
from app.core.remote_engines import parse_remote_ref
from app.core.settings import Settings
from app.core.sources import Source
from app.core.store import Message, Role, Store, history
from app.core.tool_steps import ToolStatus, ToolUse, replay, tool_key
from engine import DoneEvent, FinishReason, RoundEvent
from engine.config import ChatMessage, DrafterMode, SamplingParams, SpecParams
from engine.documents import grounding
from engine.errors import user_message
from engine.remote import RemoteError, RemoteServer

TICK_MS = 250  # store writes and live statistics while an answer streams


class ApiKeySource(Protocol):
    """Where remote engines' API keys are kept (app.core.api_keys.ApiKeys)."""

    def get(self, engine_id: str) -> str | None: ...


@dataclass(frozen=True)
class CompareJob:
    """A plain-decoding rerun of a finished answer, to measure what speculation was worth."""

    request_id: int
    message_id: int  # the answer it measures


Job = AnswerRecorder | CompareJob  # what runs on the engine; at most one at a time


@dataclass(frozen=True)
class RemoteStart:
    """A remote answer waiting for its passages (searched on the engine thread): what to send then."""

    server: RemoteServer  # the answer's from now on: closed if it never starts
    model: str
    sampling: SamplingParams


class AnswerController(QObject):
    busy_changed = Signal(bool)
    answer_started = Signal(object)  # Message: the new answer, empty, streaming
    tokens_arrived = Signal(int, object)  # message id, [Token]: only for the conversation on screen
    reasoning_arrived = Signal(int, str)  # message id, thinking text: likewise
    live_stats = Signal(int, object)  # message id, AnswerStats so far: likewise, a few times a second
    sources_arrived = Signal(int, object)  # message id, [Source]: the passages it was given; likewise
    answer_ended = Signal(object, bool)  # Message (complete, stored), whether it is on screen
    comparison_changed = Signal(int, object, bool)  # answer's message id, comparison dict or None, running
    notice = Signal(str)  # a problem to show the user (a failed store write, a failed comparison)
    status_message = Signal(str)  # a passing remark (the status bar)
    tool_uses_changed = Signal(int, object)  # message id, [ToolUse]: its tool calls as they go; shown chat only
    approval_needed = Signal(object)  # ApprovalRequest: ask the user, answer with decide()
    approval_withdrawn = Signal(int)  # message id: the answer ended while its question was open
    tool_allowed = Signal(int, str)  # conversation id, tool_key(): "always allow" was chosen there

    def __init__(
        self,
        host: EngineHostApi,
        store: Store,
        models: ModelController,
        parent: QObject | None = None,
        *,
        remote: RemoteAnswers | None = None,
        api_keys: ApiKeySource | None = None,
        mcp: McpService | None = None,
    ):
        """host: the EngineHost, or a fake that satisfies the same Protocol (tests).
        remote: what streams remote answers (None: one of its own, shut down by close()).
        api_keys: the remote engines' keys by engine id (None: every remote engine is asked without a key).
        mcp: the MCP servers whose tools a chat may offer (None: no tools)."""
        super().__init__(parent)
        self.host = host
        self.store = store
        self.models = models
        self.remote = remote if remote is not None else RemoteAnswers(self)
        self.api_keys = api_keys
        self.job: Job | None = None
        self.mcp = mcp
        self.turn: ToolTurn | None = None  # the active answer's tool loop, when its chat offers tools
        self.sent: list[Message] = []  # the stored messages the active local answer was asked with
        self.remote_start: RemoteStart | None = None  # the active answer, while its passages are searched
        self.tool_timeout_s = TOOL_TIMEOUT_S
        self.shown_conversation: int | None = None  # the conversation on screen (set by the window)
        self._tick = QTimer(self)
        self._tick.setInterval(TICK_MS)
        self._tick.timeout.connect(self._on_tick)
        w = host.worker
        w.token_received.connect(self._on_token)
        w.round_finished.connect(self._on_round)
        w.answer_finished.connect(self._on_done)
        w.answer_failed.connect(self._on_failed)
        w.sources_found.connect(self._on_sources)
        w.documents_failed.connect(self._on_documents_failed)
        w.documents_progress.connect(self._on_documents_progress)
        w.grounded_for_remote.connect(self._on_grounded_for_remote)
        self.remote.token_received.connect(self._on_token)
        self.remote.answer_finished.connect(self._on_done)
        self.remote.answer_failed.connect(self._on_failed)
        if mcp is not None:
            mcp.server_started.connect(self._on_server_ready)
            mcp.server_failed.connect(self._on_server_ready)
            mcp.call_finished.connect(self._on_call_finished)

    # -- state ----------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.job is not None

    @property
    def active(self) -> AnswerRecorder | None:
        """The answer streaming now, if any."""
        return self.job if isinstance(self.job, AnswerRecorder) else None

    @property
    def comparing(self) -> CompareJob | None:
        return self.job if isinstance(self.job, CompareJob) else None

    def streaming_in(self, conversation_id: int) -> tuple[int | None, list | None]:
        """(message id, tokens so far) of the answer streaming in that conversation, or (None, None)."""
        rec = self.active
        if rec is not None and rec.message.conversation_id == conversation_id:
            return rec.message.id, rec.tokens
        return None, None

    def flush(self) -> None:
        """Write what the answer has so far (before the window reads the conversation back)."""
        if self.active is not None:
            self.active.flush()

    # -- asking ---------------------------------------------------------------------------------

    def ask(
        self,
        conversation_id: int,
        messages: list[Message],
        settings: Settings,
        variant_of: int | None = None,
        collections: Sequence[str] = (),
        tool_servers: Sequence[str] = (),
        allowed_tools: Sequence[str] = (),
        documents_to: Sequence[str] = (),
    ) -> Message | None:
        """Answer the conversation's messages with the settings' models; the new answer, or None.

        A comparison running is stopped first: chatting never waits for a measurement.
        variant_of: the answer is written again, as an alternate in that answer's group.
        collections: the chat's document collections: its last message is grounded in their passages.
        tool_servers: the chat's MCP servers, whose tools the model may call (each call asked of the user
        first, unless its tool_key() is in allowed_tools); started first when they are not running.
        documents_to: the remote engines (ids) the chat may send its documents' passages to; to any other,
        a remote chat is asked without them.
        """
        if self.active is not None:
            return None
        if job := self.comparing:
            self._stop_comparison(job, "Comparison stopped to answer your message; Compare again when you like.")
        s = settings
        seed = s.seed if s.seed >= 0 else random.randrange(1, 2**31 - 1)
        sampling, spec = s.sampling(seed), s.spec()
        sent = history(messages)
        chat = chat_messages(sent, s.system_prompt)
        if (ref := parse_remote_ref(s.target.path or "")) is not None:
            if tool_servers:
                self.status_message.emit("Tools are offered to this computer's models only: asked without them.")
            if collections and ref[0] not in documents_to:
                self.status_message.emit(
                    "Asked without this chat's documents: their passages go to a remote engine only when you "
                    "allow it (Documents menu → Send passages to …); none of their text left this computer."
                )
            collections = tuple(collections) if ref[0] in documents_to else ()
            return self._ask_remote(conversation_id, chat, s, sampling, spec, ref, variant_of, collections)
        params = answer_params(sampling, spec, s.system_prompt, *self.models.model_names(s))
        message = self._new_answer(conversation_id, params, variant_of)
        if message is None:
            return None
        # The user's own answers feed the history index (Settings → Speculation), a comparison never.
        remember = conversation_id if s.history_drafting else None
        self.sent = sent
        if tool_servers and self.mcp is not None:
            turn = ToolTurn(conversation_id, tuple(tool_servers), set(allowed_tools), chat, sampling, spec, remember,
                            tuple(collections))  # fmt: skip
            rec = AnswerRecorder(self.store, message, -1, self.models.target_step_s, on_write_error=self.notice.emit)
            rec.stats.backend = self.models.info.backend if self.models.info else ""
            self.turn = turn
            started = self._started(rec)
            self.mcp.ensure(turn.servers)
            self._on_server_ready()  # all running already: asked at once
            return started
        request = self.host.answer(chat, sampling, spec, remember=remember, collections=tuple(collections))
        if collections:
            self.status_message.emit("Searching your documents…")
        rec = AnswerRecorder(
            self.store, message, request.id, self.models.target_step_s, on_write_error=self.notice.emit
        )
        rec.stats.backend = self.models.info.backend if self.models.info else ""
        return self._started(rec)

    def _new_answer(self, conversation_id: int, params: dict, variant_of: int | None) -> Message | None:
        """The answer's empty message in the store; None (and a notice) when it cannot be written."""
        try:
            return self.store.add_message(
                conversation_id, Role.ASSISTANT, "", complete=False, params=params, variant_of=variant_of
            )
        except STORE_WRITE_ERRORS as e:
            self.notice.emit(write_problem(e, "a new answer") + " No answer was started.")
            return None

    def _started(self, rec: AnswerRecorder) -> Message:
        self.job = rec
        self.answer_started.emit(rec.message)
        self._set_busy(True)
        return rec.message

    def _ask_remote(
        self,
        conversation_id: int,
        chat: list[ChatMessage],
        s: Settings,
        sampling: SamplingParams,
        spec: SpecParams,
        ref: tuple[str, str],
        variant_of: int | None,
        collections: tuple[str, ...] = (),
    ) -> Message | None:
        """ask() for a remote model: the engine's server streams it; it is never remembered.
        collections: search them and send the passages found with the question (the user allowed it)."""
        engine_id, model = ref
        engine = s.remote_engine(engine_id)
        if engine is None:
            self.notice.emit(
                "This chat's remote engine was removed from Settings; choose another model for it "
                "(the model picker in the chat's header). No answer was started."
            )
            return None
        key = self.api_keys.get(engine.id) if self.api_keys is not None else None
        try:
            server = RemoteServer(engine.base_url, key)
        except RemoteError as e:
            self.notice.emit(f"{engine.name}: {user_message(e)} No answer was started.")
            return None
        params = answer_params(sampling, spec, s.system_prompt, model, None)
        params["spec"] = {}  # the server decides how it speculates; its figures say what it did
        params["remote"] = {"engine": engine.name, "host": engine.host, "model": model}
        message = self._new_answer(conversation_id, params, variant_of)
        if message is None:
            server.close()
            return None
        if collections and chat and chat[-1].role == "user":
            request_id = self.host.ground_for_remote(chat, collections)  # then _on_grounded_for_remote
            self.remote_start = RemoteStart(server, model, sampling)
            self.status_message.emit(f"Searching your documents: the passages found go to {engine.host} with it.")
        else:
            request_id = self.remote.answer(server, model, chat, sampling)
        rec = AnswerRecorder(self.store, message, request_id, on_write_error=self.notice.emit)
        rec.stats.backend = f"remote · {engine.host}"
        rec.stats.remote = {"host": engine.host}  # the server's figures arrive with the end
        return self._started(rec)

    def compare(self, answer: Message, messages_before: list[Message]) -> bool:
        """Rerun the answer with plain decoding (same prompt and sampling) to measure its speed-up.

        It runs beside the chat: sending a message meanwhile stops it (see ask). A remote answer
        has no local plain run to compare with: refused, with a notice.
        """
        if answer.stats is None or self.active is not None:
            return False
        if remote := answer.params.get("remote"):
            where = f" on {remote['host']}" if isinstance(remote, dict) and remote.get("host") else " remotely"
            self.notice.emit(
                f"Compare with plain decoding runs on this computer's model, and this answer was computed{where}: "
                "there is no plain run here to compare it with. The server's own figures are under the answer."
            )
            return False
        if answer.tool_uses:  # a plain rerun would call no tool: its text could not be compared
            self.notice.emit("Compare with plain decoding is for answers without tool calls: this one called tools.")
            return False
        if self.comparing is not None:
            self.notice.emit("A comparison is running already: wait for it, or stop it with Esc.")
            return False
        sampling = sampling_from_params(answer.params)
        if answer.finish_reason in (FinishReason.CANCELLED, FinishReason.LENGTH):
            sampling = sampling.with_(max_tokens=max(answer.stats.n_tokens, 1))  # as many tokens as it had
        chat = chat_messages(history(messages_before), answer.params.get("system_prompt", ""))
        if answer.sources and chat and chat[-1].role == "user":  # the same passages as the answer had, not a new search
            chat[-1] = ChatMessage("user", grounding.message_with(chat[-1].content, answer.sources))
        request = self.host.answer(chat, sampling, SpecParams(mode=DrafterMode.OFF), purpose=RequestPurpose.COMPARE)
        self.job = CompareJob(request.id, answer.id)
        self.comparison_changed.emit(answer.id, None, True)
        self._set_busy(True)
        return True

    def stop(self) -> None:
        """Stop what runs (within one decode step, a tool call at once); its end arrives as usual."""
        if self.remote_start is not None and (rec := self.active) is not None:  # nothing was sent yet
            self._drop_remote_start()
            self._answer_ended(rec.finish(DoneEvent(FinishReason.CANCELLED, rec.live_stats(), "", None)))
            return
        if (turn := self.turn) is not None and turn.waiting != Waiting.MODEL:
            if turn.waiting == Waiting.TOOL and turn.call_key is not None:
                self.mcp.cancel(turn.call_key)  # its outcome ends the turn
            else:
                self._end_turn(FinishReason.CANCELLED, ToolStatus.CANCELLED, "stopped", None)
            return
        if self.job is not None:
            self._stop_request(self.job.request_id)

    def _stop_request(self, request_id: int) -> None:
        if is_remote_request(request_id):
            self.remote.stop(request_id)
        else:
            self.host.stop(request_id)

    def _stop_comparison(self, job: CompareJob, why: str) -> None:
        """Stop a comparison now: its late events are ignored, the answer shows what it had before."""
        self.host.stop(job.request_id)
        self.job = None
        self._set_busy(False)
        answer = self.store.message(job.message_id)
        self.comparison_changed.emit(job.message_id, answer.comparison if answer else None, False)
        self.status_message.emit(why)

    def close(self, remote_wait_s: float = REMOTE_SHUTDOWN_S) -> None:
        """The app is closing (the engine thread has ended): keep what was shown, marked stopped.
        A remote answer's stream is closed and its thread waited for, remote_wait_s at most."""
        self._tick.stop()
        self._drop_remote_start()
        self.remote.shutdown(remote_wait_s)
        if (turn := self.turn) is not None and self.active is not None:
            turn.end_unrun(ToolStatus.CANCELLED, "the app closed")
            self._write_uses(self.active, turn)
        if self.active is not None:
            self.active.cancel()
        self.job = None
        self.turn = None

    def _set_busy(self, busy: bool) -> None:
        if busy:
            self._tick.start()
        else:
            self._tick.stop()
        self.busy_changed.emit(busy)

    def _job(self, request_id: int) -> Job | None:
        return self.job if self.job is not None and self.job.request_id == request_id else None

    def _shown(self, message: Message) -> bool:
        return self.shown_conversation is not None and self.shown_conversation == message.conversation_id

    # -- events from the engine -----------------------------------------------------------------

    @Slot(int, str, str, int, bool)
    def _on_token(self, request_id: int, text: str, source: str, round_index: int, reasoning: bool) -> None:
        rec = self._job(request_id)
        if not isinstance(rec, AnswerRecorder):
            return
        token = rec.add_token(text, source, round_index, reasoning)
        if is_remote_request(request_id):  # no rounds count it: a remote answer's live count is its pieces
            rec.stats.n_tokens += 1
        if self._shown(rec.message):
            if reasoning:
                self.reasoning_arrived.emit(rec.message.id, text)
            else:
                self.tokens_arrived.emit(rec.message.id, [token])

    @Slot(int, object)
    def _on_sources(self, request_id: int, hits: list) -> None:
        rec = self._job(request_id)
        if isinstance(rec, AnswerRecorder):
            rec.set_sources([Source.from_hit(n, hit) for n, hit in enumerate(hits, 1)])
            if self._shown(rec.message):
                self.sources_arrived.emit(rec.message.id, rec.message.sources)

    @Slot(int, str)
    def _on_documents_failed(self, request_id: int, why: str) -> None:
        """Said for the answer it concerns, or (id 0) for none in particular, e.g. while counting the context."""
        if request_id == 0 or isinstance(self._job(request_id), AnswerRecorder):
            self.notice.emit(why)

    @Slot(int, str)
    def _on_documents_progress(self, request_id: int, text: str) -> None:
        """The status bar follows the search of the answer running ("" clears it once the search is done)."""
        if isinstance(self._job(request_id), AnswerRecorder):
            self.status_message.emit(text)

    @Slot(int, object)
    def _on_grounded_for_remote(self, request_id: int, messages: list[ChatMessage]) -> None:
        """The passages for a remote answer were found (sources_found came first): send it now."""
        rec, start = self._job(request_id), self.remote_start
        if not isinstance(rec, AnswerRecorder) or start is None:
            return  # stopped meanwhile: its server was closed then
        self.remote_start = None
        rec.request_id = self.remote.answer(start.server, start.model, messages, start.sampling)

    def _drop_remote_start(self) -> None:
        if (start := self.remote_start) is not None:
            self.remote_start = None
            start.server.close()

    @Slot(int, object)
    def _on_round(self, request_id: int, event: RoundEvent) -> None:
        rec = self._job(request_id)
        if isinstance(rec, AnswerRecorder):
            rec.add_round(event)

    def _on_tick(self) -> None:
        rec = self.active
        if rec is None:
            return
        rec.flush()
        if self._shown(rec.message):
            self.live_stats.emit(rec.message.id, rec.live_stats())

    @Slot(int, object)
    def _on_done(self, request_id: int, done: DoneEvent) -> None:
        match self._job(request_id):
            case AnswerRecorder() as rec if self.turn is not None:
                self._pass_done(rec, self.turn, in_stored_messages(done, self.sent))
            case AnswerRecorder() as rec:
                self._answer_ended(rec.finish(in_stored_messages(done, self.sent)))
            case CompareJob() as job:
                self._compare_ended(job, done)

    @Slot(int, str)
    def _on_failed(self, request_id: int, message: str) -> None:
        match self._job(request_id):
            case AnswerRecorder() as rec:
                self._answer_ended(rec.fail(message))
            case CompareJob() as job:
                self.job = None
                self._set_busy(False)
                self.comparison_changed.emit(job.message_id, None, False)
                self.notice.emit("The comparison failed. " + message)

    def _answer_ended(self, message: Message) -> None:
        self.job = None
        self.turn = None
        self.answer_ended.emit(message, self._shown(message))
        self._set_busy(False)

    # -- tools: the answer's loop of calls (AnswerController.turn) ----------------------------------

    def _on_server_ready(self, *_args) -> None:
        """A server started or failed: once the turn's servers are all settled, its first pass is asked."""
        turn, rec = self.turn, self.active
        if turn is None or rec is None or turn.waiting != Waiting.SERVERS or self.mcp.pending(turn.servers):
            return
        if failed := [(name, why) for name in turn.servers if (why := self.mcp.failure(name))]:
            said = "\n".join(f"{name}: {why}" for name, why in failed)
            self.notice.emit(f"Not every MCP server of this chat started; it is answered without their tools.\n{said}")
        self._ask_pass(rec, turn)

    def _ask_pass(self, rec: AnswerRecorder, turn: ToolTurn) -> None:
        """One pass of the model with the tools of the turn's running servers."""
        offered = self.mcp.tools(turn.servers)
        turn.tool_server = {tool.spec.name: tool.server for tool in offered}
        collections = turn.collections if turn.step == 0 else ()  # later passes end with a tool's result
        request = self.host.answer(
            turn.messages(),
            turn.sampling,
            turn.spec,
            remember=turn.remember,
            collections=collections,
            tools=tuple(tool.spec for tool in offered),
        )
        rec.request_id = request.id
        turn.waiting = Waiting.MODEL

    def _pass_done(self, rec: AnswerRecorder, turn: ToolTurn, done: DoneEvent) -> None:
        turn.stats = done.stats if turn.stats is None else turn.stats.then(done.stats)
        unread = unread_calls_note(done)
        if unread and not done.tool_calls:  # the call's markup is not shown: without this the answer looks empty
            ended = done.finish_reason if done.finish_reason == FinishReason.LENGTH else FinishReason.TOOL_CALLS
            done = replace(done, finish_reason=ended, error=unread)
        elif unread:
            self.notice.emit(unread)
        if done.finish_reason != FinishReason.TOOL_CALLS or not done.tool_calls:
            uses = bool(turn.uses)
            whole = replace(done, text=joined(turn.text, done.text), stats=turn.stats)
            self._answer_ended(rec.finish(whole if uses else done))
            return
        turn.add_calls(done.text, done.tool_calls)
        self._write_uses(rec, turn)
        if turn.step >= MAX_STEPS:
            why = f"not run: the answer reached its limit of {MAX_STEPS} tool steps"
            self._end_turn(FinishReason.TOOL_CALLS, ToolStatus.CANCELLED, why, f"Stopped after {MAX_STEPS} tool steps.")
            return
        self._next_call(rec, turn)

    def _next_call(self, rec: AnswerRecorder, turn: ToolTurn) -> None:
        use = turn.next_call()
        if use is None:  # every call of this pass answered: the model goes on with the results
            turn.step += 1
            self._ask_pass(rec, turn)
        elif not use.server:
            self._end_turn(FinishReason.TOOL_CALLS, ToolStatus.FAILED, "no server offers it",
                           f"The model called {use.name}, which none of this chat's servers offers.")  # fmt: skip
        elif turn.needs_approval(use):
            turn.waiting = Waiting.APPROVAL
            self.approval_needed.emit(ApprovalRequest(turn.conversation_id, rec.message.id, use))
        else:
            self._run(turn, use)

    def decide(self, use_id: str, decision: str) -> None:
        """The user's answer about the call asked: "once", "always" (this tool in this chat) or "deny"."""
        turn, rec = self.turn, self.active
        if turn is None or rec is None or turn.waiting != Waiting.APPROVAL or turn.current is None:
            return
        use = turn.current
        if use.id != use_id:
            return
        if decision == "deny":
            why = f"You denied {use.name} on {use.server}: the answer stops here."
            self._end_turn(FinishReason.TOOL_CALLS, ToolStatus.DENIED, "denied by you", why)
            return
        if decision == "always":
            key = tool_key(use.server, use.name)
            turn.allowed.add(key)
            self.tool_allowed.emit(turn.conversation_id, key)
        self._run(turn, use)

    def _run(self, turn: ToolTurn, use: ToolUse) -> None:
        turn.waiting = Waiting.TOOL
        timeout = self.mcp.timeout_s(use.server) or self.tool_timeout_s  # mcp.json's "timeout" for this server
        turn.call_key = self.mcp.call(use.server, use.name, use.arguments, timeout)

    @Slot(object)
    def _on_call_finished(self, outcome: CallOutcome) -> None:
        self.mcp.forget_call(outcome.key)
        turn, rec = self.turn, self.active
        if turn is None or rec is None or turn.call_key != outcome.key or turn.current is None:
            return
        use = turn.current
        use.elapsed_s = outcome.elapsed_s
        turn.call_key = None
        match outcome.error_kind:
            case "":
                use.status, use.result = ToolStatus.DONE, outcome.text
            case "tool":  # the model reads what went wrong and may correct itself: not the end
                use.status, use.result, use.error = ToolStatus.FAILED_TOOL, outcome.text or outcome.error, outcome.error
            case "cancelled":
                self._end_turn(FinishReason.CANCELLED, ToolStatus.CANCELLED, "stopped", None)
                return
            case "timeout":
                why = f"{outcome.error}. If it needs longer, raise {use.server}'s Time limit in Settings › MCP servers…"
                self._end_turn(FinishReason.TOOL_CALLS, ToolStatus.TIMED_OUT, outcome.error, why)
                return
            case _:
                self.mcp.server_lost(use.server, outcome.error)
                self._end_turn(FinishReason.TOOL_CALLS, ToolStatus.FAILED, outcome.error, outcome.error)
                return
        self._write_uses(rec, turn)
        self._next_call(rec, turn)

    def _end_turn(self, reason: FinishReason, status: ToolStatus, why: str, error: str | None) -> None:
        """The turn ends before the model's last word: everything said and done so far is kept."""
        turn, rec = self.turn, self.active
        if turn is None or rec is None:
            return
        withdrawn = turn.waiting == Waiting.APPROVAL
        turn.end_unrun(status, why)
        self._write_uses(rec, turn)
        if withdrawn:
            self.approval_withdrawn.emit(rec.message.id)
        stats = turn.stats if turn.stats is not None else rec.live_stats()
        self._answer_ended(rec.finish(DoneEvent(reason, stats, turn.text, error)))

    def _write_uses(self, rec: AnswerRecorder, turn: ToolTurn) -> None:
        rec.message.tool_uses = list(turn.uses)
        if not rec.write_error:
            rec._write(self.store.set_tool_uses, rec.message.id, turn.uses)
        if self._shown(rec.message):
            self.tool_uses_changed.emit(rec.message.id, list(turn.uses))

    def _compare_ended(self, job: CompareJob, done: DoneEvent) -> None:
        self.job = None
        self._set_busy(False)
        # From the store, by id: the user may have switched conversations meanwhile, and the
        # measured result is stored for when they come back.
        answer = self.store.message(job.message_id)
        if answer is None:  # deleted meanwhile
            return
        if done.finish_reason in (FinishReason.CANCELLED, FinishReason.ERROR):
            self.comparison_changed.emit(job.message_id, answer.comparison, False)
            if done.error:
                self.notice.emit("The comparison failed. " + done.error)
            return
        comparison = build_comparison(answer, done)
        self.store.set_comparison(job.message_id, comparison)
        self.comparison_changed.emit(job.message_id, comparison, False)


def chat_messages(messages: list[Message], system_prompt: str) -> list[ChatMessage]:
    """The stored conversation as the model is sent it: an answer that called tools as it happened."""
    chat = [ChatMessage("system", system_prompt)] if system_prompt else []
    for m in messages:
        if m.role == Role.ASSISTANT and m.tool_uses:
            chat += replay(m.content, m.tool_uses, m.reasoning)
        else:
            chat.append(ChatMessage(m.role, prompt_text(m.content, m.attachments), m.reasoning))
    return chat


def stored_count(messages: list[Message], n_sent: int) -> int:
    """How many of the stored messages the n_sent oldest messages as the model is sent them cover, wholly or
    in part: an answer that called tools is sent as several (each call, each result, the text after)."""
    covered = 0
    for message in messages:
        if n_sent <= 0:
            break
        n_sent -= len(chat_messages([message], ""))
        covered += 1
    return covered


def in_stored_messages(done: DoneEvent, sent: list[Message]) -> DoneEvent:
    """done with the messages it left out counted as the chat shows them (the engine counts them as sent)."""
    if not done.stats.n_history_dropped:
        return done
    return replace(done, stats=replace(done.stats, n_history_dropped=stored_count(sent, done.stats.n_history_dropped)))


def build_comparison(answer: Message, plain: DoneEvent) -> dict:
    spec_tps = answer.stats.gen_tps if answer.stats else 0.0
    plain_tps = plain.stats.gen_tps
    identical, first = compare_texts(answer.content, plain.text)
    return {
        "spec_tps": spec_tps,
        "plain_tps": plain_tps,
        "measured_speedup": spec_tps / plain_tps if plain_tps > 0 else 0.0,
        "identical": identical,
        "first_difference": first,
        "plain_tokens": plain.stats.n_tokens,
        "plain_text": plain.text,  # shown beside the answer on request
        "temperature": answer.params.get("sampling", {}).get("temperature", 0.0),
        "seed": answer.params.get("sampling", {}).get("seed"),
    }
