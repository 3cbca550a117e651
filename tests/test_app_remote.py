"""The real window with a remote engine: a Specula server on loopback (tests/test_remote_servers.py's
subprocess fixture) added in the settings, its model picked in the chat header, an answer streamed
from it with the server's figures, a Stop, and a server gone. The local model stays loaded and
untouched throughout. Waits are bounded; nothing asserts a duration.
"""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import socket

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.bridge.remote_catalog import RemoteChoice
from app.chat.model_picker import ADD_REMOTE
from app.core.remote_engines import RemoteEngine, remote_ref
from app.core.settings import Settings
from app.core.store import Role
from app.dialogs.remote_engines_dialog import RemoteEnginesDialog
from engine import FinishReason
from tests import test_remote_servers
from tests.app_helpers import ANSWER_TIMEOUT_MS, ask, make_window, smol_settings, wait_answer  # noqa: F401 (a fixture)
from tests.test_remote_engines_settings import fill
from tests.test_remote_servers import KEY, SPECULA_MODEL

specula = test_remote_servers.specula  # the server subprocess, for this module too

LIST_TIMEOUT_MS = 60_000


def _window_with_engine(qtbot, make_window, smollm2_path, url: str, key: str | None = KEY):
    engine = RemoteEngine("Test box", url)
    settings = smol_settings(smollm2_path, max_tokens=40)
    settings.remote_engines = [engine]
    window = make_window(settings)
    if key:
        window.api_keys.set(engine.id, key)  # as the Remote engines dialog does
        window.remote_catalog.refresh()
    return window, engine


def _pick_remote(qtbot, window, ref: str) -> None:
    """Choose the remote model in the chat header's target list, as a user would."""
    combo = window.header.model_picker.target_combo

    def offered() -> int:
        return next((i for i in range(combo.count()) if getattr(combo.itemData(i), "ref", None) == ref), -1)

    qtbot.waitUntil(lambda: offered() >= 0, timeout=LIST_TIMEOUT_MS)
    index = offered()
    assert isinstance(combo.itemData(index), RemoteChoice) and "remote · 127.0.0.1" in combo.itemText(index)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def test_a_chat_picks_a_remote_model_and_its_answers_come_from_there(
    qtbot, make_window, smollm2_path, specula, tmp_path
):
    _server, url = specula
    window, engine = _window_with_engine(qtbot, make_window, smollm2_path, url)
    ref = remote_ref(engine.id, SPECULA_MODEL)
    local = window.settings.target.path
    loaded_key = window.models.loaded_key

    _pick_remote(qtbot, window, ref)

    assert window.session.chat_settings.target == ref and window.session.remote
    assert window.settings.target.path == local  # the app's default stays the local model
    assert window.models.loaded_key == loaded_key and not window.session.busy  # nothing loads here
    # The server's tokenizer and context decide what fits: the meter says so rather than count here.
    qtbot.waitUntil(lambda: "127.0.0.1" in window.composer.meter.label.text(), timeout=LIST_TIMEOUT_MS)
    assert not window.composer.meter.warning.isVisible()
    answer = ask(qtbot, window, "Count from 1 to 5.")
    assert answer.role == Role.ASSISTANT and answer.content and answer.complete
    assert answer.params["remote"]["host"] == "127.0.0.1" and answer.stats.remote["source"] == "specula"
    widget = window.chat_view.message_widget(answer.id)
    footer = " ".join(label.text() for label in widget.footer.figure_labels)
    assert "computed on 127.0.0.1" in footer
    assert window.models.loaded_key == loaded_key  # the local model was never asked

    # Regenerate keeps the first answer as an alternate, as with a local model; the export names the
    # engine and never its key.
    window.session.regenerate(answer.id)
    wait_answer(qtbot, window)
    again = window.session.messages[-1]
    assert again.id != answer.id and again.group == answer.id and again.params["remote"]["host"] == "127.0.0.1"
    window.write_export(window.session.conversation, "json", tmp_path / "chat.json")
    exported = (tmp_path / "chat.json").read_text()
    assert '"engine": "Test box"' in exported and KEY not in exported

    # The chat keeps its remote model across a restart of the app's view of it.
    conversation = window.session.conversation.id
    window.session.new_conversation()
    assert not window.session.remote
    qtbot.waitUntil(lambda: "/ 2,048 tokens" in window.composer.meter.label.text(), timeout=LIST_TIMEOUT_MS)
    window.session.open_conversation(conversation)
    assert window.session.remote and window.header.model_picker.target_path == ref


def test_stop_ends_a_remote_answer_with_its_text_so_far(qtbot, make_window, smollm2_path, specula):
    _server, url = specula
    window, engine = _window_with_engine(qtbot, make_window, smollm2_path, url)
    _pick_remote(qtbot, window, remote_ref(engine.id, SPECULA_MODEL))
    window.settings.max_tokens = 400
    ask(qtbot, window, "Count from 1 to 200, separated by commas.", wait=False)
    qtbot.waitUntil(
        lambda: len(window.session.messages) == 2 and bool(window.answers.active and window.answers.active.text),
        timeout=ANSWER_TIMEOUT_MS,
    )
    window.session.stop()
    wait_answer(qtbot, window)
    stopped = window.store.message(window.session.messages[-1].id)
    assert stopped.finish_reason == FinishReason.CANCELLED and stopped.content


def test_a_remote_engine_that_is_gone_says_so_and_loses_nothing(qtbot, make_window, smollm2_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    window, engine = _window_with_engine(qtbot, make_window, smollm2_path, f"http://127.0.0.1:{port}/v1", key=None)
    qtbot.waitUntil(lambda: engine.id in window.remote_catalog.problems, timeout=LIST_TIMEOUT_MS)
    assert "Could not reach" in window.remote_catalog.problems[engine.id]
    ref = remote_ref(engine.id, "big-model")
    window.session.use_remote(ref)  # chosen earlier, when it was there
    picker = window.header.model_picker
    qtbot.waitUntil(lambda: "not reachable" in picker.target_combo.itemText(0), timeout=LIST_TIMEOUT_MS)

    ask(qtbot, window, "Are you there?")
    question, answer = window.store.messages(window.session.conversation.id)
    assert question.content == "Are you there?"  # kept
    assert answer.finish_reason == FinishReason.ERROR and "Could not reach" in answer.error
    assert not window.session.busy


def test_an_engine_added_from_the_chat_headers_model_list_offers_its_models(qtbot, make_window, smollm2_path, specula):
    _server, url = specula
    window = make_window(smol_settings(smollm2_path))
    combo = window.header.model_picker.target_combo
    qtbot.waitUntil(lambda: combo.findData(ADD_REMOTE) >= 0, timeout=LIST_TIMEOUT_MS)
    shown = combo.currentText()

    def add_engine() -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, RemoteEnginesDialog)
        fill(dialog, qtbot, "Test box", url, KEY)  # typed, as a user would
        dialog.accept()

    QTimer.singleShot(0, add_engine)
    index = combo.findData(ADD_REMOTE)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)

    (engine,) = window.settings.remote_engines
    assert engine.name == "Test box" and Settings.load(Settings.default_path()).remote_engines == [engine]
    assert window.api_keys.get(engine.id) == KEY and KEY not in Settings.default_path().read_text()
    assert combo.currentText() == shown  # the chat's model stays chosen
    _pick_remote(qtbot, window, remote_ref(engine.id, SPECULA_MODEL))
