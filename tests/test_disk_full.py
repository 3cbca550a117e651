"""A full disk while an answer streams: a message, the answer goes on, what was written is kept.

The disk is full for real as far as SQLite can tell: `PRAGMA max_page_count` caps the database
at its current size, so the next write that needs a page fails with SQLITE_FULL ("database or
disk is full"), exactly as on a full disk.
"""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import sqlite3

from app.core.answers import AnswerRecorder, write_problem
from app.core.store import Store
from engine.decoding.events import DoneEvent, FinishReason
from engine.decoding.stats import AnswerStats
from tests.app_helpers import ask, make_window, smol_settings, wait_answer  # noqa: F401 (a fixture)


def fill_up(store: Store) -> None:
    """From now on the database cannot grow: the disk is full."""
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")


def free_space(store: Store) -> None:
    store.db.execute("PRAGMA max_page_count = 1073741823")


def test_the_recorder_stops_writing_keeps_what_it_wrote_and_says_so_once(tmp_path):
    store = Store(tmp_path / "chats.sqlite3")
    conv = store.create_conversation("t")
    message = store.add_message(conv.id, "assistant", complete=False)
    told: list[str] = []
    rec = AnswerRecorder(store, message, 1, on_write_error=told.append)
    for i in range(5):
        rec.add_token(f"t{i} ", "target", i)
    rec.flush()
    assert rec.written == 5
    fill_up(store)
    # Stream until a write needs a page the database may not take (bounded: each flush grows it).
    saved_text = rec.text
    for i in range(5, 5000):
        rec.add_token(f"token number {i} " * 20, "draft", i)
        rec.flush()
        if rec.write_error:
            break
        saved_text = rec.text
    assert rec.write_error and "disk is full" in rec.write_error
    assert told == [rec.write_error]
    written = rec.written
    assert written >= 5

    for i in range(10):  # the answer goes on; nothing more is written, nothing raises
        rec.add_token(f"after {i} ", "target", 0)
        rec.flush()
    shown = rec.finish(DoneEvent(FinishReason.STOP, AnswerStats(n_tokens=len(rec.tokens)), rec.text))
    assert shown.complete and shown.content == rec.text and len(shown.tokens) == len(rec.tokens)
    assert told == [rec.write_error]  # once

    stored = store.message(message.id)
    assert stored.content == saved_text and len(stored.tokens) == written  # kept as far as it was written
    assert not stored.complete  # it never finished on disk: the next start shows it as incomplete

    free_space(store)  # space is back: the store works again (no transaction was left open)
    later = store.add_message(conv.id, "user", "still here")
    assert store.message(later.id).content == "still here"
    store.close()


def test_write_problem_names_the_full_disk_and_other_failures():
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13
    assert "disk is full" in write_problem(full, "this answer")
    assert "disk is full" in write_problem(OSError(28, "No space left on device"), "your message")
    ro = sqlite3.OperationalError("attempt to write a readonly database")
    ro.sqlite_errorcode = 8
    assert "cannot be written" in write_problem(ro, "this answer") and "readonly" in write_problem(ro, "x")


def fill_tokens_page(store: Store, message_id: int) -> None:
    """The disk is full, and the page the answer's next tokens go to has no byte left.

    With the database capped first, no filler can split a page: rows of shrinking size fill the
    last leaf of the tokens table (where this answer's rows are), so its next row needs a page.
    The fillers sit at indexes past any real token (FILLER_INDEX and up).
    """
    fill_up(store)
    n = 0
    for size in (1000, 100, 10, 1):
        while True:
            try:
                store.db.execute(
                    "INSERT INTO tokens (message_id, idx, text, source, round) VALUES (?, ?, ?, 'target', 0)",
                    (message_id, FILLER_INDEX + n, "x" * size),
                )
                n += 1
            except sqlite3.OperationalError as e:
                assert e.sqlite_errorcode & 0xFF == 13  # SQLITE_FULL
                break


FILLER_INDEX = 10**9


def test_the_window_shows_a_message_and_keeps_the_answer_when_the_disk_fills_mid_answer(
    qtbot, make_window, smollm2_path
):
    window = make_window(smol_settings(smollm2_path, max_tokens=300))
    ask(qtbot, window, "Count from 1 to 300, one number per line.", wait=False)
    qtbot.waitUntil(lambda: window.answers.active is not None and window.answers.active.written > 0, timeout=60_000)
    rec = window.answers.active  # its first write went through; now the disk fills up
    fill_tokens_page(window.store, rec.message.id)
    wait_answer(qtbot, window)

    answer = window.session.messages[-1]
    assert answer.id == rec.message.id and rec.write_error and "disk is full" in rec.write_error
    notices = [n.label.text() for n in window.chat_view.notices]
    assert any("disk is full" in n for n in notices)
    widget = window.chat_view.message_widget(answer.id)
    assert widget.body.plain_text() == answer.content != ""  # on screen, in full
    stored = window.store.message(answer.id)
    assert stored.content and answer.content.startswith(stored.content) and len(stored.content) < len(answer.content)
    real = window.store.db.execute(
        "SELECT count(*) FROM tokens WHERE message_id = ? AND idx < ?", (answer.id, FILLER_INDEX)
    ).fetchone()[0]
    assert real == rec.written < len(rec.tokens)

    free_space(window.store)  # space again: the next answer is saved (nothing was left half-open)
    again = ask(qtbot, window, "Say hello.")
    assert window.store.message(again.id).complete


def test_a_full_disk_when_sending_keeps_the_text_in_the_input_box(qtbot, make_window):
    from app.core.settings import ModelSettings, Settings

    window = make_window(Settings(target=ModelSettings("/models/not-loaded.gguf")), wait=False)
    conv = window.store.create_conversation("full")
    window.session.open_conversation(conv.id)
    fill_up(window.store)
    n = 0
    for size in (1000, 100, 10, 1):  # the last page of messages, byte for byte (no page may split)
        while True:
            try:
                window.store.add_message(conv.id, "user", "x" * size + str(n))
                n += 1
            except sqlite3.OperationalError:
                break
    before = len(window.store.messages(conv.id))
    window.composer.input.setPlainText("a question I do not want to type again " * 5)

    assert window.send_message(window.composer.input.toPlainText()) is False

    assert "a question I do not want to type again" in window.composer.input.toPlainText()
    assert any("disk is full" in n.label.text() for n in window.chat_view.notices)
    assert len(window.store.messages(conv.id)) == before and not window.session.busy
