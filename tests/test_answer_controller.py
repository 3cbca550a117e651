"""The answer lifecycle without a model: the sequences that are hard to reach end to end.

The engine's side is a fake EngineHost (tests/fake_host.py, a seam we own): it records the
requests the controller sends and lets the test emit the real EngineWorker's signals in any order,
as the engine thread would deliver them. The store, the recorder, the load guard and both controllers are the real ones;
the assertions are on what the window would be told and what the store keeps.
"""

from __future__ import annotations

import pytest

from app.bridge.answer_controller import AnswerController
from app.bridge.model_controller import EngineState, ModelController
from app.core.load_guard import LoadGuard
from app.core.settings import ModelSettings, Settings
from app.core.store import Store, Token
from engine import FinishReason
from engine.config import ChatMessage, DrafterMode
from tests.fake_host import FakeEngineHost

TARGET = "/models/target.gguf"  # never read: nothing is loaded


class Seen:
    """Every signal the controllers emit, in order, as (name, args)."""

    NAMES = [
        "busy_changed",
        "answer_started",
        "tokens_arrived",
        "reasoning_arrived",
        "live_stats",
        "answer_ended",
        "comparison_changed",
        "notice",
        "status_message",
    ]

    def __init__(self, answers: AnswerController, models: ModelController):
        self.events: list[tuple[str, tuple]] = []
        for name in self.NAMES:
            getattr(answers, name).connect(lambda *args, name=name: self.events.append((name, args)))
        for name in ("ready", "load_failed"):
            getattr(models, name).connect(lambda *args, name=name: self.events.append(("models." + name, args)))

    def named(self, name: str) -> list[tuple]:
        return [args for n, args in self.events if n == name]

    def clear(self) -> None:
        self.events.clear()


@pytest.fixture
def rig(qtbot, tmp_path):
    host = FakeEngineHost()
    store = Store(tmp_path / "chats.sqlite")
    models = ModelController(host, LoadGuard(tmp_path / "load_guard.json"))
    answers = AnswerController(host, store, models)
    settings = Settings(target=ModelSettings(TARGET), temperature=0.0, system_prompt="Be brief.")
    conv = store.create_conversation("Primes")
    user = store.add_message(conv.id, "user", "The first primes?")
    answers.shown_conversation = conv.id
    yield host, store, models, answers, settings, conv, [user], Seen(answers, models)
    store.close()


def answered(rig, text="2, 3, 5", gen_s=1.0):
    """Run one ordinary answer to its end; its stored message."""
    host, store, _models, answers, settings, conv, messages, _seen = rig
    message = answers.ask(conv.id, messages, settings)
    host.tokens(host.requests[-1], text)
    host.done(host.requests[-1], text, gen_s=gen_s)
    messages.append(message)
    return store.message(message.id)


def test_send_tokens_done_reach_the_screen_and_the_store_in_order(qtbot, rig):
    host, store, _models, answers, settings, conv, messages, seen = rig

    message = answers.ask(conv.id, messages, settings)

    (request,) = host.requests
    assert request.purpose == "answer" and request.spec.mode != DrafterMode.OFF
    assert request.messages == [ChatMessage("system", "Be brief."), ChatMessage("user", "The first primes?")]
    assert seen.events == [("answer_started", (message,)), ("busy_changed", (True,))]
    assert answers.busy and answers.active.message is message and not store.message(message.id).complete

    host.tokens(request, "Thinking…", reasoning=True)
    host.tokens(request, "2,", " 3")
    assert seen.named("reasoning_arrived") == [(message.id, "Thinking…")]
    assert seen.named("tokens_arrived") == [
        (message.id, [Token("2,", "target", 0)]),
        (message.id, [Token(" 3", "target", 0)]),
    ]
    # The tick writes what streamed and refreshes the live figures, while the answer runs.
    qtbot.waitUntil(lambda: store.message(message.id).content == "2, 3")
    qtbot.waitUntil(lambda: bool(seen.named("live_stats")))
    assert seen.named("live_stats")[-1][0] == message.id

    seen.clear()
    host.done(request, "2, 3")
    assert [name for name, _ in seen.events] == ["answer_ended", "busy_changed"]
    (ended, shown), (busy,) = seen.named("answer_ended")[0], seen.named("busy_changed")[0]
    assert ended is message and shown and busy is False
    stored = store.message(message.id)
    assert stored.complete and stored.content == "2, 3" and stored.finish_reason == "stop"
    assert stored.reasoning == "Thinking…" and not answers.busy and answers.active is None

    seen.clear()
    host.tokens(request, " late")  # a straggler of an ended request changes nothing
    host.done(request, "2, 3 late")
    assert seen.events == [] and store.message(message.id).content == "2, 3"


def test_switching_conversation_mid_answer_keeps_streaming_to_the_store_not_the_screen(qtbot, rig):
    host, store, _models, answers, settings, conv, messages, seen = rig
    other = store.create_conversation("Elsewhere")
    message = answers.ask(conv.id, messages, settings)
    (request,) = host.requests
    host.tokens(request, "one")

    answers.flush()  # what the window does before it reads the other conversation
    answers.shown_conversation = other.id
    assert store.message(message.id).content == "one"
    seen.clear()
    host.tokens(request, " two", " three")
    host.tokens(request, "hmm", reasoning=True)
    qtbot.waitUntil(lambda: store.message(message.id).content == "one two three")  # the tick still writes
    assert seen.named("tokens_arrived") == seen.named("reasoning_arrived") == seen.named("live_stats") == []
    assert answers.streaming_in(other.id) == (None, None)

    answers.shown_conversation = conv.id  # back: the window redraws it from the streamed tokens
    streaming_id, tokens = answers.streaming_in(conv.id)
    assert streaming_id == message.id and "".join(t.text for t in tokens) == "one two three"
    answers.shown_conversation = other.id
    host.done(request, "one two three")

    assert seen.named("answer_ended") == [(message, False)]  # ended out of sight: nothing to draw
    assert seen.named("busy_changed")[-1] == (False,)
    stored = store.message(message.id)
    assert stored.complete and stored.content == "one two three" and stored.reasoning == "hmm"


def test_answers_feed_the_history_index_only_when_it_is_on_and_comparisons_never(rig):
    host, _store, _models, answers, settings, conv, messages, _seen = rig
    answer = answered(rig)
    assert host.requests[-1].purpose == "answer" and host.requests[-1].remember == conv.id
    assert host.requests[-1].spec.history  # auto may draft from it

    answers.compare(answer, messages[:1])
    compare = host.requests[-1]
    assert compare.purpose == "compare" and compare.remember is None
    host.done(compare, "2, 3, 5")

    settings.history_drafting = False
    answers.ask(conv.id, messages[:1], settings, variant_of=answer.id)
    assert host.requests[-1].purpose == "answer" and host.requests[-1].remember is None
    assert not host.requests[-1].spec.history


def test_stop_during_a_comparison_stops_the_rerun_and_keeps_the_answer_as_it_was(rig):
    host, store, _models, answers, settings, conv, messages, seen = rig
    answer = answered(rig)
    seen.clear()

    assert answers.compare(answer, messages[:1])
    compare = host.requests[-1]
    assert compare.purpose == "compare" and compare.spec.mode == DrafterMode.OFF
    assert compare.sampling.max_tokens == settings.max_tokens  # the answer ended by itself: same limit
    assert seen.events == [("comparison_changed", (answer.id, None, True)), ("busy_changed", (True,))]
    assert answers.comparing.message_id == answer.id and answers.active is None

    answers.stop()
    assert host.stopped == [compare.id] and compare.cancel.is_set()
    assert answers.busy  # until the engine says the rerun ended
    host.done(compare, "2,", reason=FinishReason.CANCELLED)

    assert seen.named("comparison_changed")[-1] == (answer.id, None, False)  # back to no comparison
    assert seen.named("busy_changed")[-1] == (False,) and seen.named("notice") == []
    assert store.message(answer.id).comparison is None and not answers.busy
    assert seen.named("answer_ended") == []  # a comparison is not an answer


def test_asking_while_a_comparison_runs_stops_it_and_answers_at_once(rig):
    host, store, _models, answers, settings, conv, messages, seen = rig
    answer = answered(rig, gen_s=1.0)
    answers.compare(answer, messages[:1])
    compare = host.requests[-1]
    seen.clear()

    regenerated = answers.ask(conv.id, messages[:1], settings, variant_of=answer.id)  # chatting does not wait

    assert compare.cancel.is_set() and host.stopped == [compare.id]
    assert regenerated is not None and host.requests[-1].purpose == "answer"
    assert regenerated.variant_of == answer.id and regenerated.variants == [answer.id, regenerated.id]
    assert seen.named("comparison_changed") == [(answer.id, None, False)]  # the answer shows no half result
    assert "Comparison stopped" in seen.named("status_message")[0][0]
    assert answers.active is not None and answers.comparing is None
    host.done(compare, "2,", reason=FinishReason.CANCELLED)  # its late end changes nothing
    assert answers.active is not None and store.message(answer.id).comparison is None
    assert seen.named("answer_ended") == []


def test_a_second_comparison_is_refused_with_a_notice(rig):
    _host, _store, _models, answers, _settings, _conv, messages, seen = rig
    answer = answered(rig)
    assert answers.compare(answer, messages[:1])
    seen.clear()
    assert not answers.compare(answer, messages[:1])
    assert "running already" in seen.named("notice")[0][0]


def test_a_comparison_that_fails_says_so_and_shows_no_figure(rig):
    host, store, _models, answers, _settings, _conv, messages, seen = rig
    answer = answered(rig)
    answers.compare(answer, messages[:1])
    seen.clear()

    host.worker.answer_failed.emit(host.requests[-1].id, "Out of memory.")

    assert seen.events == [
        ("busy_changed", (False,)),
        ("comparison_changed", (answer.id, None, False)),
        ("notice", ("The comparison failed. Out of memory.",)),
    ]
    assert store.message(answer.id).comparison is None


def test_a_load_that_fails_during_an_answer_ends_it_with_the_engine_s_message(rig):
    host, store, models, answers, settings, conv, messages, seen = rig
    assert models.load(settings) and models.state == EngineState.LOADING
    assert host.loads[0][0].path == TARGET
    message = answers.ask(conv.id, messages, settings)  # asked while the model loads
    request = host.requests[-1]
    assert message.params["target"] == "target"  # named from the file until the model is loaded

    host.worker.load_failed.emit("'target.gguf' is damaged.")
    assert models.state == EngineState.FAILED and models.info is None
    assert seen.named("models.load_failed") == [("'target.gguf' is damaged.",)]
    assert "'target.gguf' is damaged." in models.load_guard.last_problem(TARGET)
    assert answers.busy  # the queued request has not been answered yet

    host.worker.answer_failed.emit(request.id, "No model is loaded.")  # as the worker answers it

    ((ended, shown),) = seen.named("answer_ended")
    assert ended.id == message.id and shown and seen.named("busy_changed")[-1] == (False,)
    stored = store.message(message.id)
    assert stored.complete and stored.finish_reason == "error" and stored.error == "No model is loaded."
    assert not answers.busy


def test_closing_mid_answer_keeps_what_streamed_marked_stopped(rig):
    host, store, models, answers, settings, conv, messages, seen = rig
    models.load(settings)
    message = answers.ask(conv.id, messages, settings)
    host.tokens(host.requests[-1], "2, 3")

    models.close()
    answers.close()

    stored = store.message(message.id)
    assert stored.complete and stored.content == "2, 3" and stored.finish_reason == "cancelled"
    assert not answers.busy and models.load_guard.last_problem(TARGET) is None  # abandoned, not failed


class OneToolServer:
    """The MCP service's surface a tool turn uses before any call is made: one server, running, one tool."""

    def ensure(self, names) -> None:
        pass

    def pending(self, names) -> bool:
        return False

    def failure(self, name: str) -> str:
        return ""

    def tools(self, names):
        from app.bridge.mcp_service import OfferedTool
        from engine.tools import ToolSpec

        return [OfferedTool("files", ToolSpec("read_file", "Read a file.", {"type": "object"}))]


@pytest.mark.parametrize("reason", [FinishReason.STOP, FinishReason.LENGTH])
def test_a_tool_call_that_cannot_be_read_is_said_not_shown_as_an_empty_answer(rig, reason):
    from engine import AnswerStats, DoneEvent
    from engine.tools import MalformedToolCall

    host, store, _models, answers, settings, conv, messages, seen = rig
    answers.mcp = OneToolServer()
    message = answers.ask(conv.id, messages, settings, tool_servers=["files"])
    request = host.requests[-1]
    assert [t.name for t in request.tools] == ["read_file"]
    # The call's markup never reaches the window (the worker skips it): the pass ends with no text.
    bad = MalformedToolCall(
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes', "the call is not valid JSON"
    )
    done = DoneEvent(reason, AnswerStats(n_tokens=12, gen_s=1.0), "", malformed_calls=(bad,))
    host.worker.answer_finished.emit(request.id, done)

    stored = store.message(message.id)
    assert stored.complete and not stored.tool_uses
    if reason == FinishReason.LENGTH:
        assert stored.finish_reason == FinishReason.LENGTH and "Max tokens in the middle of a tool call" in stored.error
    else:
        assert stored.finish_reason == FinishReason.TOOL_CALLS
        assert (
            stored.error
            == "The model wrote a tool call that could not be read, so it was not run: the call is not valid JSON."
        )
    ((ended, _shown),) = seen.named("answer_ended")
    assert ended.error == stored.error
