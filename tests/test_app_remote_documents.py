"""A chat answered by a remote engine, with documents (issue 31): their passages leave this computer
only after the user allows it, per chat and engine, and are then sent with the question and cited.

The real window, the real library thread and the scripted server of tests/test_remote_scripted.py,
which records the body of every request it gets: what was sent is read there, not inferred. Waits
are bounded; nothing asserts a duration.
"""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers and the remote test modules)

from __future__ import annotations

import json
import threading

from app.bridge.worker import REMOTE_PASSAGE_CHARS
from app.core.chat_settings import ChatSettings
from engine import FinishReason
from tests import test_app_remote_faults, test_remote_scripted
from tests.app_helpers import ask, make_window, wait_answer  # noqa: F401 (a fixture)
from tests.signal_log import SignalLog
from tests.test_app_documents import licenses  # noqa: F401 (a fixture)
from tests.test_app_remote_faults import CHAT, behaves

scripted_server = test_remote_scripted.scripted_server
scripted = test_remote_scripted.scripted
window_on = test_app_remote_faults.window_on

QUESTION = "What goes in the NOTICE text file of Derivative Works?"
PASSAGE = '"NOTICE" text file'  # in the Apache-2.0 passage that answers it
INDEX_TIMEOUT_MS = 60_000


def sent_chats(scripted) -> list[dict]:
    """The bodies of the chat requests the server got, in order."""
    return [body for method, path, _h, body in scripted.requests if (method, path) == ("POST", "/v1/chat/completions")]


def send_action(window):
    return next(a for a in window.composer.documents_button.menu().actions() if a.text().startswith("Send passages"))


def with_licences(qtbot, window, folder) -> None:
    """The licences indexed as a collection, ticked in the chat's Documents menu as a user would."""
    indexed = SignalLog(window.documents.indexed)  # from the library's thread (tests/signal_log.py)
    window.documents.add_collection("Licences")
    window.documents.add_sources("Licences", [str(folder)])
    window.documents.update("Licences")
    indexed.wait(qtbot, 0, timeout_ms=INDEX_TIMEOUT_MS)
    menu = window.composer.documents_button.menu()
    qtbot.waitUntil(lambda: "Licences" in [a.text() for a in menu.actions()])
    next(a for a in menu.actions() if a.text() == "Licences").trigger()
    assert window.session.chat_settings.collections == ["Licences"]


def test_passages_go_to_a_remote_engine_only_once_the_user_allows_it(
    qtbot, window_on, scripted, licenses, isolated_home
):
    window = window_on()
    scripted.routes[CHAT] = behaves("It is kept in the NOTICE file [1].")
    with_licences(qtbot, window, licenses)
    engine = window.settings.remote_engines[0]
    button = window.composer.documents_button
    assert send_action(window).text() == "Send passages to Test box (127.0.0.1)"
    assert not send_action(window).isChecked() and "127.0.0.1) is asked without them" in button.toolTip()

    # By default the question goes alone, and nothing of the documents with it.
    answer = ask(qtbot, window, QUESTION)
    sent = sent_chats(scripted)[-1]
    assert sent["messages"][-1]["content"] == QUESTION and PASSAGE not in json.dumps(sent)
    assert answer.finish_reason == FinishReason.STOP and answer.sources == []

    # Ticking it asks first; keeping them here leaves it off.
    send_action(window).trigger()
    dialog = window.remote_passages_dialog
    assert dialog is not None and "Test box" in dialog.text() and "Licences" in dialog.informativeText()
    assert f"up to about {REMOTE_PASSAGE_CHARS:,} characters" in dialog.informativeText()
    dialog.keep_button.click()
    qtbot.waitUntil(lambda: window.remote_passages_dialog is None, timeout=5_000)
    assert window.session.chat_settings.documents_to == [] and not send_action(window).isChecked()

    # Allowed: the passages found go with the question, cited, and the answer lists its sources.
    send_action(window).trigger()
    window.remote_passages_dialog.grab().save(str(isolated_home / "remote-passages.png"))
    window.remote_passages_dialog.send_button.click()
    qtbot.waitUntil(lambda: window.session.chat_settings.documents_to == [engine.id], timeout=5_000)
    assert send_action(window).isChecked() and button.text() == "Documents: Licences → 127.0.0.1"
    answer = ask(qtbot, window, QUESTION)
    question = sent_chats(scripted)[-1]["messages"][-1]["content"]
    assert PASSAGE in question and "[1]" in question and question.rstrip().endswith(QUESTION)
    assert len(question) <= len(QUESTION) + REMOTE_PASSAGE_CHARS  # the passages' budget, markers and all
    assert answer.finish_reason == FinishReason.STOP and answer.content == "It is kept in the NOTICE file [1]."
    assert answer.sources and PASSAGE in " ".join(s.text for s in answer.sources)
    panel = window.chat_view.message_widget(answer.id).sources_panel
    assert panel.isVisible() and len(panel.rows) == len(answer.sources)
    window.grab().save(str(isolated_home / "remote-answer-with-sources.png"))
    stored = window.store.messages(window.session.conversation.id)[-1]
    assert [s.to_dict() for s in stored.sources] == [s.to_dict() for s in answer.sources]
    assert ChatSettings.from_dict(window.session.conversation.settings).documents_to == [engine.id]

    # Unticked: alone again.
    send_action(window).trigger()
    assert window.session.chat_settings.documents_to == [] and window.remote_passages_dialog is None
    ask(qtbot, window, QUESTION)
    assert sent_chats(scripted)[-1]["messages"][-1]["content"] == QUESTION


def test_stop_while_the_passages_are_searched_sends_nothing(qtbot, window_on, scripted, licenses):
    window = window_on()
    scripted.routes[CHAT] = behaves("Never sent.")
    with_licences(qtbot, window, licenses)
    send_action(window).trigger()
    window.remote_passages_dialog.send_button.click()
    qtbot.waitUntil(lambda: window.session.chat_settings.documents_to != [], timeout=5_000)
    before = len(sent_chats(scripted))
    gate = threading.Event()
    window.host.dispatch(lambda: gate.wait(30))  # the engine thread is busy: the search waits behind it
    try:
        ask(qtbot, window, QUESTION, wait=False)
        assert window.session.busy and window.answers.remote_start is not None
        window.session.stop()
        wait_answer(qtbot, window)
    finally:
        gate.set()
    answer = window.session.messages[-1]
    assert answer.finish_reason == FinishReason.CANCELLED and answer.content == ""
    searched = threading.Event()
    window.host.dispatch(searched.set)  # runs once the search queued before it has ended
    qtbot.waitUntil(searched.is_set, timeout=30_000)
    qtbot.wait(100)  # its result reaches the GUI thread, after the Stop: dropped, nothing is sent
    assert len(sent_chats(scripted)) == before and window.answers.remote_start is None
    assert window.session.messages[-2].content == QUESTION  # the question is kept


def test_a_folder_dropped_on_a_remote_chat_says_its_passages_stay_here(qtbot, window_on, scripted, licenses):
    window = window_on()
    window.add_dropped_folders([str(licenses)])  # what a drop on the box does (tests/test_app_documents.py)
    (notice,) = [n for n in window.chat_view.notices if "“licenses”" in n.text()]
    assert "Test box gets no passages until you allow it in the Documents menu" in notice.text()
    assert window.session.chat_settings.collections == ["licenses"] and not window.session.chat_settings.documents_to
