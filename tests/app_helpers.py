"""Shared pieces of the app tests: windows on a real engine, and the no-leaked-thread check."""

from __future__ import annotations

import pytest

from app.bridge.worker import running_threads
from app.core.settings import ModelSettings, Settings

LOAD_TIMEOUT_MS = 120_000
ANSWER_TIMEOUT_MS = 120_000


def smol_settings(model: str, **changes) -> Settings:
    """SmolLM2 as target and as its own draft; greedy, short answers, a small context."""
    values = dict(
        target=ModelSettings(model),
        draft=ModelSettings(model),
        context_size=2048,
        temperature=0.0,
        max_tokens=64,
    )
    values.update(changes)
    return Settings(**values)


@pytest.fixture
def make_window(qtbot, isolated_home):
    """make_window(settings, wait=True) -> a shown MainWindow on the isolated data folder.

    At teardown every window is closed (its engine thread ended) and no engine thread may be
    left running.
    """
    from app.bridge.model_controller import EngineState
    from app.core.store import Store
    from app.main_window import MainWindow
    from engine.models.library import ModelLibrary

    windows, stores = [], []

    def make(settings: Settings | None = None, wait: bool = True) -> MainWindow:
        """settings None: what the data folder holds (as a restarted app would read it)."""
        store = Store()
        stores.append(store)
        window = MainWindow(
            store, settings if settings is not None else Settings.load(), library=ModelLibrary(scan_external=False)
        )
        windows.append(window)
        window.show()
        window.activateWindow()
        if wait:
            qtbot.waitUntil(
                lambda: window.models.state in (EngineState.READY, EngineState.FAILED), timeout=LOAD_TIMEOUT_MS
            )
        return window

    yield make
    for window in windows:
        window.close()
    for store in stores:
        store.close()
    assert running_threads() == [], "an engine QThread is still running after the test"


def ask(qtbot, window, text: str, wait: bool = True):
    """Type text into the input box and press Enter, as a user would."""
    from PySide6.QtCore import Qt

    window.composer.input.setFocus()
    qtbot.keyClicks(window.composer.input, text)
    qtbot.keyClick(window.composer.input, Qt.Key.Key_Return)
    if wait:
        wait_answer(qtbot, window)
    return window.session.messages[-1]


def wait_answer(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.session.busy, timeout=ANSWER_TIMEOUT_MS)


def wait_comparison(qtbot, window) -> None:
    """Until a compare-with-plain rerun ends (it runs beside the chat: window.session.busy stays False)."""
    qtbot.waitUntil(lambda: window.answers.comparing is None, timeout=ANSWER_TIMEOUT_MS)
