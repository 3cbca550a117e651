"""Kill the app mid-answer: what was shown is in the database, marked incomplete."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.store import DB_NAME, Store
from tests.app_helpers import make_window, smol_settings  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parent.parent
MIN_TOKENS = 30

# The app, headless, on SmolLM2 with a long answer. It never finishes by itself: the test kills it.
CHILD = """
import os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.main_window import MainWindow
from app.bridge.model_controller import EngineState
from app.core.settings import ModelSettings, Settings
from app.core.store import Store
from engine.models.library import ModelLibrary
model = sys.argv[1]
settings = Settings(target=ModelSettings(model), draft=ModelSettings(model), context_size=4096,
                    temperature=0.0, max_tokens=3000)
window = MainWindow(Store(), settings, library=ModelLibrary(scan_external=False))
window.show()
def ask():
    if window.models.state == EngineState.READY and not window.session.messages:
        window.send_message("Count from 1 to 1000, one number per line.")
timer = QTimer()
timer.timeout.connect(ask)
timer.start(50)
app.exec()
"""


def tokens_written(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM tokens").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # not created yet


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_kill_mid_answer_keeps_the_partial_answer_marked_incomplete(qtbot, make_window, smollm2_path, isolated_home):
    db = isolated_home / DB_NAME
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, smollm2_path],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while tokens_written(db) < MIN_TOKENS:
            assert child.poll() is None, child.stderr.read().decode(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the app never streamed an answer"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL

    store = Store(db)
    try:
        conversations = store.conversations()
        assert len(conversations) == 1
        user, answer = store.messages(conversations[0].id)
        assert user.content.startswith("Count from 1 to 1000")
        assert answer.role == "assistant" and not answer.complete and answer.finish_reason is None
        assert len(answer.tokens) >= MIN_TOKENS
        assert answer.content == "".join(t.text for t in answer.tokens)
        assert answer.stats is not None and answer.stats.n_tokens >= MIN_TOKENS  # live statistics so far
    finally:
        store.close()

    # The app shows it again, marked incomplete.
    window = make_window(smol_settings(smollm2_path))
    window.sidebar.select(window.sidebar.ids()[0])
    widget = window.chat_view.message_widget(answer.id)
    assert widget.body.text == answer.content
    assert "Incomplete" in widget.footer.state_label.text() and widget.footer.state_label.isVisibleTo(widget)
