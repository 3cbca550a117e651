"""The app's real start path (app.main.open_window) over damaged chats and settings files."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QMessageBox

from app.bridge.model_controller import EngineState
from app.bridge.worker import running_threads
from app.main_window import _starter_available
from app.ui.about import where_chats_are


def start(qtbot):
    from app.main import open_window

    window = open_window()
    qtbot.addWidget(window)
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: bool(window.welcome.note.text()) or window.models.state != EngineState.NONE)  # start() ran
    return window


def notice_box(window) -> QMessageBox | None:
    return window.findChild(QMessageBox, "start_notice")


def close(window) -> None:
    window.close()
    window.store.close()
    assert running_threads() == []


def test_damaged_chats_and_settings_open_a_window_that_says_what_happened(qtbot, isolated_home):
    isolated_home.mkdir(parents=True)
    chats = isolated_home / "chats.sqlite3"
    chats.write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 3000)
    settings = isolated_home / "settings.json"
    settings.write_text('{"target": {"path": "/models/my-own-model.gguf"}, "temperature": 0.2')

    window = start(qtbot)
    try:
        box = notice_box(window)
        assert box is not None and box.isVisible()
        text = box.text()
        assert "chats.sqlite3" in text and "damaged" in text and "nothing was deleted" in text
        assert "settings.json" in text and "could not be read" in text
        kept_chats = list(isolated_home.glob("chats.sqlite3.damaged-*"))
        kept_settings = list(isolated_home.glob("settings.json.damaged-*"))
        assert len(kept_chats) == 1 and kept_chats[0].read_bytes().startswith(b"SQLite format 3\x00\xde\xad")
        assert len(kept_settings) == 1 and "my-own-model" in kept_settings[0].read_text()
        # No starter pair quietly chosen over the user's unreadable choice: the welcome page asks.
        assert window.settings.target.path == ""
        assert window.pages.currentWidget() is window.welcome
        assert "could not be read" in window.welcome.note.text()
        assert window.welcome.starter_button.isEnabled() == _starter_available()  # not started by itself
        # And the app works: a new chat is saved in the fresh database.
        conv = window.store.create_conversation("works")
        assert window.store.saved and window.store.conversation(conv.id).title == "works"
    finally:
        close(window)


def test_a_healthy_start_shows_no_notice(qtbot, isolated_home):
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(json.dumps({"target": {"path": "/models/gone.gguf"}}))
    window = start(qtbot)
    try:
        assert notice_box(window) is None
        assert "is gone" in window.welcome.note.text()
    finally:
        close(window)


def test_out_of_range_settings_are_named_in_the_start_notice(qtbot, isolated_home):
    isolated_home.mkdir(parents=True)
    (isolated_home / "settings.json").write_text(
        '\ufeff{"target": {"path": "/models/gone.gguf", "threads": -3}, "top_p": 5, "context_size": -5}',
        encoding="utf-8",
    )
    window = start(qtbot)
    try:
        text = notice_box(window).text()
        assert "top_p" in text and "context_size" in text and "target.threads" in text
        assert window.settings.top_p == 1.0 and window.settings.context_size == 512
        assert window.settings.target.path == "/models/gone.gguf"  # the choice itself is kept
    finally:
        close(window)


def test_about_says_where_chats_are_kept_and_when_they_are_not(qtbot, isolated_home, monkeypatch):
    from app.core.settings import Settings
    from app.core.store import Store
    from app.main_window import MainWindow

    window = MainWindow(Store(), Settings())  # no model: nothing is loaded
    qtbot.addWidget(window)
    try:
        where = where_chats_are(window.store)
        assert "Chats are kept in" in where and str(window.store.path) in where and "memory" not in where
        monkeypatch.setattr(window.store, "saved", False)  # as when the file could not be written
        assert "in memory only" in where_chats_are(window.store) and "could not be written" in where_chats_are(
            window.store
        )
    finally:
        close(window)
