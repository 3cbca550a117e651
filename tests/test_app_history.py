"""History drafting in the app: the Settings switch and Erase, answers added to the index, deleted chats gone."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from app.core.settings import Settings
from app.core.store import Store
from app.dialogs.settings_dialog import SettingsDialog
from engine.history.store import HistoryIndex
from engine.paths import history_dir
from tests.app_helpers import ask, make_window, smol_settings  # noqa: F401 (a fixture)


def vocabulary_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def held(folder: Path) -> set[int]:
    """The conversations a vocabulary's index holds, as a fresh start would read them from disk."""
    n_vocab = json.loads((folder / "index.json").read_text("utf-8"))["n_vocab"]
    index = HistoryIndex(folder, n_vocab)
    try:
        assert not index.problem
        return index.conversations()
    finally:
        index.close()


def answer_question(monkeypatch, button):
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kwargs: button)


def test_the_switch_survives_a_restart_and_off_keeps_auto_from_history(qtbot, isolated_home):
    path = isolated_home / "settings.json"
    dialog = SettingsDialog(Settings(), None, history_dir=isolated_home / "history")
    qtbot.addWidget(dialog)
    assert dialog.history_drafting.isChecked()  # on by default
    assert str(isolated_home / "history") in dialog.history_note.text()

    dialog.history_drafting.setChecked(False)
    dialog.result_settings().save(path)
    again = Settings.load(path)
    assert again.history_drafting is False and again.spec().history is False and not again.load_notices

    dialog = SettingsDialog(again, None)
    qtbot.addWidget(dialog)
    assert not dialog.history_drafting.isChecked()
    dialog.restore_defaults()  # a speculation setting: the defaults turn it back on
    assert dialog.history_drafting.isChecked() and dialog.result_settings().spec().history is True


def test_erase_asks_first_then_deletes_every_vocabulary_s_index(qtbot, isolated_home, monkeypatch):
    root = history_dir()
    for name, n_vocab in (("vocab-a", 100), ("vocab-b", 300)):
        index = HistoryIndex(root / name, n_vocab)
        index.add(7, [1, 2, 3, 4])
        index.close()
    dialog = SettingsDialog(Settings(), None)
    qtbot.addWidget(dialog)
    assert "on disk" in dialog.history_size.text()

    answer_question(monkeypatch, QMessageBox.StandardButton.Cancel)
    assert not dialog.erase_history()
    assert len(vocabulary_folders(root)) == 2 and held(root / "vocab-a") == {7}

    answer_question(monkeypatch, QMessageBox.StandardButton.Yes)
    dialog.erase_history_button.click()
    assert not root.exists() and dialog.history_size.text() == "Nothing kept yet"


def test_an_answer_is_remembered_and_deleting_its_chat_forgets_it(qtbot, make_window, smollm2_path, isolated_home):
    window = make_window(smol_settings(smollm2_path, max_tokens=8))
    window.header.colours_button.setChecked(True)
    assert "history" in window.header.legend.text()  # beside the draft model and prompt lookup
    ask(qtbot, window, "Name a colour.")
    conversation = window.session.conversation.id
    (folder,) = vocabulary_folders(isolated_home / "history")
    assert held(folder) == {conversation}
    index = window.host.worker.engine.history
    assert index.conversations() == {conversation} and index.n_tokens > 8

    with qtbot.waitSignal(window.host.worker.history_forgotten, timeout=30_000) as forgotten:
        window.session.delete_conversation(conversation)
    assert forgotten.args == [conversation]
    assert held(folder) == set() and index.conversations() == set()

    # Off: answers are no longer added.
    window.settings.history_drafting = False
    window.session.new_conversation()
    ask(qtbot, window, "Name a fruit.")
    assert held(folder) == set() and index.n_tokens == 0


def test_chats_purged_at_start_leave_the_history_index(qtbot, make_window, isolated_home):
    store = Store()
    gone, kept = store.create_conversation("Gone"), store.create_conversation("Kept")
    store.delete_conversation(gone.id)
    store.close()
    folder = history_dir() / "vocab"
    index = HistoryIndex(folder, 100)
    index.add(gone.id, [1, 2, 3])
    index.add(kept.id, [4, 5, 6])
    index.close()

    make_window(Settings(), wait=False)  # its store purges the deleted chat; the window forgets it

    # Forgetting writes the next generation and replaces index.json last: read the files once it has.
    generation = lambda: json.loads((folder / "index.json").read_text("utf-8"))["generation"]  # noqa: E731
    qtbot.waitUntil(lambda: generation() == 1, timeout=30_000)
    assert held(folder) == {kept.id}
