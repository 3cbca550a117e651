"""The real window against a remote engine that misbehaves (issue 25, item 4): the scripted fault
server of tests/test_remote_scripted.py added in the settings, its model picked in the chat header,
and each fault a remote engine can have: nothing listening, no answer at all, a wrong key, a model
the server no longer has, 429 (retried, then given up), a stream cut mid-answer, malformed events,
and Stop mid-answer. Each must give a clear message in the window and lose nothing: the question
stays in the store, the window is not busy afterwards, and sending again works once the server
behaves. Waits are bounded; nothing asserts a duration.
"""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers and tests.test_remote_scripted)

from __future__ import annotations

import functools
import socket

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocumentFragment

from app.bridge import answer_controller
from app.core.remote_engines import RemoteEngine, remote_ref
from app.core.store import Role
from engine import FinishReason
from engine.remote import RemoteServer
from tests import test_remote_scripted
from tests.app_helpers import ANSWER_TIMEOUT_MS, ask, make_window, wait_answer  # noqa: F401 (a fixture)
from tests.test_app_remote import LIST_TIMEOUT_MS, _pick_remote, _window_with_engine
from tests.test_remote_scripted import (
    KEY,
    WAIT_S,
    busy_once_then,
    chunk,
    cut_after,
    first_then_hang,
    send_json,
    streams,
)

# The scripted fault server (a thread for this module) and its per-test reset, used here by name.
scripted_server = test_remote_scripted.scripted_server
scripted = test_remote_scripted.scripted

CHAT = "POST /v1/chat/completions"
MODELS = "GET /v1/models"
MODEL = "m"
QUESTION = "What is the answer?"
READ_TIMEOUT_S = 0.5  # the app's client waits 300 s for a silent server; this module's, this long


def models_route(*ids: str):
    return lambda h: send_json(h, 200, {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})


def behaves(text: str = "Fine."):
    return streams(chunk(content=text), chunk(finish="stop"))


@pytest.fixture
def window_on(qtbot, make_window, smollm2_path, scripted, monkeypatch):
    """window_on(key=None, read_timeout_s=WAIT_S) -> a window whose chat has picked the scripted
    server's model MODEL.

    The app offers no setting for its remote client's read timeout (AnswerController builds
    RemoteServer(base_url, key) with engine.remote's 300 s), so it is shortened here by replacing
    the RemoteServer that app.bridge.answer_controller calls: a silent server is then reported in
    READ_TIMEOUT_S, and no other fault can hang a test for longer than WAIT_S.
    """

    def make(key: str | None = None, read_timeout_s: float = WAIT_S):
        monkeypatch.setattr(
            answer_controller, "RemoteServer", functools.partial(RemoteServer, read_timeout_s=read_timeout_s)
        )
        scripted.routes[MODELS] = models_route(MODEL)
        window, engine = _window_with_engine(qtbot, make_window, smollm2_path, scripted.url, key=key)
        _pick_remote(qtbot, window, remote_ref(engine.id, MODEL))
        assert window.session.remote and not window.session.busy
        return window

    return make


def shown_texts(window, answer) -> tuple[str, str, bool]:
    """What the answer's message widget shows: its text, its error line, whether that line shows."""
    widget = window.chat_view.message_widget(answer.id)
    assert widget is not None
    error_line = QTextDocumentFragment.fromHtml(widget.error_label.text()).toPlainText()  # as read on screen
    return widget.body.plain_text(), error_line, not widget.error_label.isHidden()


def stored_pair(window):
    """The question and the answer the store holds for this chat (exactly those two)."""
    question, answer = window.store.messages(window.session.conversation.id)
    return question, answer


def assert_sending_again_works(qtbot, window, scripted) -> None:
    """The window takes a new question once the server behaves, and the old ones stay."""
    scripted.routes[CHAT] = behaves("Fine.")
    before = len(window.store.messages(window.session.conversation.id))
    again = ask(qtbot, window, "And now?")
    assert again.role == Role.ASSISTANT and not window.session.busy
    stored = window.store.messages(window.session.conversation.id)
    assert len(stored) == before + 2 and stored[0].content == QUESTION and stored[-2].content == "And now?"
    assert (stored[-1].content, stored[-1].finish_reason, stored[-1].error) == ("Fine.", FinishReason.STOP, None)


def assert_not_busy(window) -> None:
    assert not window.session.busy and not window.answers.busy
    assert window.composer.button.text() == "Send"


# -- faults that end the answer with a message --------------------------------------------------------


def refused_key(handler):
    """401, echoing the key in the server's own message (as some servers do)."""
    send_json(handler, 401, {"error": {"message": f"Invalid API key {handler.headers['Authorization'].split()[-1]}"}})


def busy_for_good(handler):
    send_json(handler, 429, {"error": {"message": "queue full"}}, {"Retry-After": "0"})


def malformed(*events):
    return lambda _scripted: streams(chunk(content="Before"), *events)


FAULTS = [
    # key, read timeout, the chat route (a function of the scripted server), the text kept, words in the error
    pytest.param(
        None,
        READ_TIMEOUT_S,
        lambda s: s.hang,
        "",
        [f"sent nothing back for {READ_TIMEOUT_S:g} s"],
        id="never-answers",
    ),
    pytest.param(
        None,
        READ_TIMEOUT_S,
        first_then_hang,
        "First",
        ["The answer was cut off: ", f"went silent in the middle of the answer for {READ_TIMEOUT_S:g} s"],
        id="silent-mid-answer",
    ),
    pytest.param(
        KEY, WAIT_S, lambda _s: refused_key, "", ["refused the API key (HTTP 401)", "Check the API key"], id="401"
    ),
    pytest.param(
        None,
        WAIT_S,
        lambda _s: busy_for_good,
        "",
        ["was still busy after 3 retries (HTTP 429): queue full"],
        id="429-past-the-retries",
    ),
    pytest.param(
        None,
        WAIT_S,
        lambda _s: cut_after(chunk(content="The an"), chunk(content="swer is")),
        "The answer is",
        ["The answer was cut off: ", "was cut off", "kept, marked as cut off"],
        id="stream-cut",
    ),
    pytest.param(
        None,
        WAIT_S,
        lambda _s: streams(chunk(content="Half"), done=False),
        "Half",
        ["The answer was cut off: ", "ended without a finish reason"],
        id="stream-ends-early",
    ),
    pytest.param(
        None,
        WAIT_S,
        malformed("{not json"),
        "Before",
        ["The answer was cut off: ", "an event that is not JSON"],
        id="event-not-json",
    ),
    pytest.param(
        None,
        WAIT_S,
        malformed('{"id": "x"}'),
        "Before",
        ["The answer was cut off: ", "an event without choices"],
        id="event-without-choices",
    ),
    pytest.param(
        None,
        WAIT_S,
        malformed({"error": {"message": "llama_decode failed", "type": "server_error"}}),
        "Before",
        ["The answer was cut off: ", "stopped the answer with an error: llama_decode failed"],
        id="error-event",
    ),
]


@pytest.mark.parametrize(("key", "read_timeout_s", "route", "kept", "said"), FAULTS)
def test_a_fault_says_so_in_the_window_and_loses_nothing(
    qtbot, window_on, scripted, key, read_timeout_s, route, kept, said
):
    window = window_on(key, read_timeout_s)
    scripted.routes[CHAT] = route(scripted)
    ask(qtbot, window, QUESTION)

    question, answer = stored_pair(window)
    assert question.role == Role.USER and question.content == QUESTION  # kept
    assert answer.finish_reason == FinishReason.ERROR and answer.content == kept
    assert answer.error and all(words in answer.error for words in said), answer.error
    assert answer.error.startswith("The answer was cut off: ") == bool(kept)  # cut off only with text kept
    body, error_line, error_shown = shown_texts(window, answer)
    assert error_shown and all(words in error_line for words in said), error_line
    assert kept in body
    assert window.chat_view.message_widget(answer.id).meta_label.text() == "on 127.0.0.1 (remote)"
    if key is not None:  # the key went to the server, and is nowhere in what the window says
        assert scripted.requests[-1][2]["authorization"] == f"Bearer {key}"
        assert "Invalid API key •••" in answer.error
        assert not [
            text for text in (answer.error, error_line, body, window.statusBar().currentMessage()) if key in text
        ]
    assert_not_busy(window)
    assert_sending_again_works(qtbot, window, scripted)


def test_nothing_listening_says_the_server_is_unreachable_and_loses_nothing(qtbot, make_window, smollm2_path, scripted):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    window, engine = _window_with_engine(qtbot, make_window, smollm2_path, f"http://127.0.0.1:{port}/v1", key=None)
    window.session.use_remote(remote_ref(engine.id, MODEL))  # chosen earlier, when it was there
    ask(qtbot, window, QUESTION)

    question, answer = stored_pair(window)
    assert question.content == QUESTION and answer.finish_reason == FinishReason.ERROR and answer.content == ""
    assert answer.error.startswith(f"Could not reach http://127.0.0.1:{port}: connection refused"), answer.error
    _, error_line, error_shown = shown_texts(window, answer)
    assert error_shown and f"Could not reach http://127.0.0.1:{port}: connection refused" in error_line
    assert_not_busy(window)

    # The user corrects the engine's address (as the Remote engines dialog does): the chat answers.
    scripted.routes[MODELS] = models_route(MODEL)
    window.settings.remote_engines = [RemoteEngine(engine.name, scripted.url, engine.id)]
    window.remote_catalog.set_engines(window.settings.remote_engines)
    assert_sending_again_works(qtbot, window, scripted)


def test_an_unknown_model_is_named_with_the_ones_the_server_has(qtbot, window_on, scripted):
    window = window_on()
    scripted.routes[MODELS] = models_route("alpha", "beta")  # the picked model is gone from the server
    scripted.routes[CHAT] = lambda h: send_json(
        h, 404, {"error": {"message": f"The model `{MODEL}` does not exist.", "type": "NotFoundError"}}
    )
    ask(qtbot, window, QUESTION)

    question, answer = stored_pair(window)
    assert question.content == QUESTION and answer.finish_reason == FinishReason.ERROR and answer.content == ""
    assert f"has no model '{MODEL}'; it has alpha, beta." in answer.error
    _, error_line, error_shown = shown_texts(window, answer)
    assert error_shown and f"has no model '{MODEL}'; it has alpha, beta." in error_line
    assert_not_busy(window)
    scripted.routes[MODELS] = models_route(MODEL, "alpha", "beta")  # it is back
    assert_sending_again_works(qtbot, window, scripted)


def test_429_with_retry_after_then_the_answer_arrives(qtbot, window_on, scripted):
    window = window_on()
    route = scripted.routes[CHAT] = busy_once_then(behaves("Done, after the wait."))
    ask(qtbot, window, QUESTION)

    question, answer = stored_pair(window)
    assert question.content == QUESTION and route.calls == 2
    assert (answer.content, answer.finish_reason, answer.error) == ("Done, after the wait.", FinishReason.STOP, None)
    body, _, error_shown = shown_texts(window, answer)
    assert "Done, after the wait." in body and not error_shown
    assert_not_busy(window)
    assert_sending_again_works(qtbot, window, scripted)


def test_stop_mid_answer_keeps_the_text_and_the_server_sees_the_client_go(qtbot, window_on, scripted):
    window = window_on(read_timeout_s=600)  # only Stop ends this answer (or the waits' bounds)
    scripted.routes[CHAT] = first_then_hang(scripted)
    remote_answers = window.answers.remote
    ask(qtbot, window, QUESTION, wait=False)
    qtbot.waitUntil(lambda: bool(window.answers.active and window.answers.active.text), timeout=ANSWER_TIMEOUT_MS)
    assert window.composer.button.text() == "Stop"
    qtbot.mouseClick(window.composer.button, Qt.MouseButton.LeftButton)  # the user's Stop
    wait_answer(qtbot, window)

    question, answer = stored_pair(window)
    assert question.content == QUESTION
    assert (answer.content, answer.finish_reason, answer.error) == ("First", FinishReason.CANCELLED, None)
    body, _, error_shown = shown_texts(window, answer)
    assert "First" in body and not error_shown
    qtbot.waitUntil(lambda: scripted.clients_gone == 1, timeout=LIST_TIMEOUT_MS)  # it stopped generating
    qtbot.waitUntil(lambda: remote_answers.running == [], timeout=LIST_TIMEOUT_MS)
    assert_not_busy(window)
    assert_sending_again_works(qtbot, window, scripted)
