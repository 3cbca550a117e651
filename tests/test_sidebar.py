"""The conversation list without a model: date groups, pinning, search snippets, and a click on
the open chat that does not start a rename."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import sqlite3
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication

from app.chat.sidebar import Sidebar, group
from app.core.store import MIGRATIONS, Conversation, Store, snippet
from tests.app_helpers import make_window  # noqa: F401 (a fixture)

DAY = 86_400


def test_store_pins_survive_reopening_and_an_old_database_gains_the_column(tmp_path):
    path = tmp_path / "chats.sqlite3"
    old = sqlite3.connect(path)  # a database as the previous version left it (schema 2)
    old.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in [s for step in MIGRATIONS[:2] for s in step]:
        old.execute(statement)
    old.execute("INSERT INTO schema_version VALUES (2)")
    old.execute("INSERT INTO conversations (title, created, updated) VALUES ('Old chat', 1, 1)")
    old.commit()
    old.close()

    store = Store(path)
    new = store.create_conversation("New chat")
    assert [c.title for c in store.conversations()] == ["New chat", "Old chat"]
    old_id = store.conversations()[1].id
    store.set_pinned(old_id, True)
    store.close()

    again = Store(path)
    listed = again.conversations()
    assert [(c.title, c.pinned) for c in listed] == [("Old chat", True), ("New chat", False)]
    again.set_pinned(old_id, False)
    assert [c.id for c in again.conversations()] == [new.id, old_id]
    again.close()


def test_search_results_carry_a_snippet_of_the_first_match(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    soup = store.create_conversation("Soup")
    store.add_message(soup.id, "user", "How do I make a good TOMATO soup for six people on a cold evening?")
    store.create_conversation("Tomatoes in the title")
    store.create_conversation("Primes")
    found = {c.title: c.snippet for c in store.conversations("tomato")}
    store.close()
    assert set(found) == {"Soup", "Tomatoes in the title"}
    assert "TOMATO soup" in found["Soup"]
    assert found["Tomatoes in the title"] == ""  # the title itself matched
    assert snippet("x" * 100 + " needle " + "y" * 100, "needle", around=10).startswith("…")
    assert snippet("x" * 100 + " needle " + "y" * 100, "needle", around=10).endswith("…")


def test_group_headings_by_day_with_pinned_first():
    now = time.mktime((2026, 12, 1, 12, 0, 0, 0, 0, -1))
    at = lambda days, pinned=False: Conversation(1, "t", 0, now - days * DAY, pinned)  # noqa: E731
    assert [group(at(d), now) for d in (0, 1, 3, 30)] == ["Today", "Yesterday", "Previous 7 days", "Earlier"]
    assert group(at(30, pinned=True), now) == "Pinned"


def test_the_list_shows_headings_that_clicks_and_arrow_keys_pass_by(qtbot):
    sidebar = Sidebar()
    qtbot.addWidget(sidebar)
    sidebar.resize(300, 500)
    now = time.time()
    conversations = [
        Conversation(3, "Pinned plan", 0, now - 40 * DAY, pinned=True),
        Conversation(1, "Today's chat", 0, now),
        Conversation(2, "Long ago", 0, now - 40 * DAY),
    ]
    sidebar.set_conversations(conversations, current_id=1)
    sidebar.show()
    assert sidebar.headings() == ["Pinned", "Today", "Earlier"]
    assert sidebar.ids() == [3, 1, 2] and sidebar.titles() == ["Pinned plan", "Today's chat", "Long ago"]
    opened = []
    sidebar.conversation_selected.connect(opened.append)
    sidebar.list.setFocus()
    qtbot.keyClick(sidebar.list, Qt.Key.Key_Down)  # over the "Earlier" heading
    assert sidebar.current_id() == 2 and opened == [2]
    qtbot.keyClick(sidebar.list, Qt.Key.Key_Up)
    assert sidebar.current_id() == 1


def test_clicking_the_open_chat_does_not_rename_it_and_delete_deletes_it(qtbot):
    sidebar = Sidebar()
    qtbot.addWidget(sidebar)
    sidebar.set_conversations([Conversation(7, "Keep my title", 0, time.time())], current_id=7)
    sidebar.show()
    deleted = []
    sidebar.delete_requested.connect(deleted.append)
    item = next(
        sidebar.list.item(i)
        for i in range(sidebar.list.count())
        if sidebar.list.item(i).data(Qt.ItemDataRole.UserRole) == 7
    )
    centre = sidebar.list.visualItemRect(item).center()
    qtbot.mouseClick(sidebar.list.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    qtbot.wait(QApplication.doubleClickInterval() + 200)  # when a second click would have started a rename
    assert sidebar.list.state() != QAbstractItemView.State.EditingState
    sidebar.list.setFocus()
    qtbot.keyClick(sidebar.list, Qt.Key.Key_Delete)
    assert deleted == [7] and item.text() == "Keep my title"


def test_search_results_show_the_match_and_are_not_renamed_in_place(qtbot):
    sidebar = Sidebar()
    qtbot.addWidget(sidebar)
    sidebar.search.setText("soup")
    hit = Conversation(4, "Dinner", 0, time.time(), snippet="…a good tomato soup for six…")
    sidebar.set_conversations([hit], current_id=None)
    item = sidebar.list.item(1)
    assert item.text() == "Dinner\n…a good tomato soup for six…" and sidebar.titles() == ["Dinner"]
    assert not item.flags() & Qt.ItemFlag.ItemIsEditable


def test_pinning_from_the_window_moves_the_chat_to_the_top_and_is_remembered(qtbot, make_window, isolated_home):
    store = Store()
    old = store.create_conversation("Old plan")
    store.create_conversation("Newer chat")
    store.close()
    window = make_window(wait=False)
    assert window.sidebar.titles() == ["Newer chat", "Old plan"]
    window.sidebar.pin_requested.emit(old.id, True)  # what the context menu's "Pin to top" sends
    assert window.sidebar.titles() == ["Old plan", "Newer chat"] and window.sidebar.headings()[0] == "Pinned"
    window.close()
    again = make_window(wait=False)
    assert again.sidebar.titles() == ["Old plan", "Newer chat"]
