"""A model that failed to load, or took the app down while loading, is not loaded again unasked."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from pathlib import Path

from PySide6.QtWidgets import QToolButton

from app.bridge.model_controller import EngineState
from app.core.load_guard import LoadGuard
from tests import gguf_damage
from tests.app_helpers import LOAD_TIMEOUT_MS, make_window, smol_settings  # noqa: F401 (a fixture)


def _buttons(window) -> dict[str, QToolButton]:
    return {b.text(): b for notice in window.chat_view.notices for b in notice.findChildren(QToolButton)}


def _notices(window) -> str:
    return " ".join(notice.text() for notice in window.chat_view.notices)


def test_the_guard_remembers_a_load_that_never_ended_or_failed(tmp_path):
    guard = LoadGuard(tmp_path / "model-load.json")
    assert guard.last_problem("/m/a.gguf") is None
    guard.begin("/m/a.gguf")  # ... and the process dies here
    assert "never finished" in LoadGuard(guard.file).last_problem("/m/a.gguf")
    assert guard.last_problem("/m/b.gguf") is None  # another target is loaded as usual
    guard.failed("/m/a.gguf", "'a.gguf' is damaged: its layer count is 0.")
    assert "layer count is 0" in guard.last_problem("/m/a.gguf")
    guard.succeeded()
    assert guard.last_problem("/m/a.gguf") is None and not guard.file.exists()


def test_a_bad_target_in_settings_fails_once_then_the_next_start_asks(qtbot, make_window, smollm2_path, tmp_path):
    src = Path(smollm2_path)
    damage = next(d for d in gguf_damage.catalogue(src) if d.name == "block-count-100000")
    bad = tmp_path / damage.filename
    gguf_damage.sparse_copy(damage, src, bad)
    settings = smol_settings(str(bad))
    settings.draft.path = ""
    settings.save()

    first = make_window(None)  # as the app starts: the settings file names the bad target
    assert first.models.state == EngineState.FAILED
    assert damage.filename in _notices(first) and "block_count" in _notices(first)
    first.close()

    second = make_window(None, wait=False)
    qtbot.waitUntil(lambda: "Try again" in _buttons(second), timeout=10_000)
    assert second.models.state == EngineState.NONE  # not loaded by itself
    assert "was not loaded automatically" in _notices(second) and "block_count" in _notices(second)
    _buttons(second)["Try again"].click()  # the user asks: it is tried, and fails with its message again
    qtbot.waitUntil(lambda: second.models.state == EngineState.FAILED, timeout=LOAD_TIMEOUT_MS)


def test_after_a_crash_while_loading_the_app_asks_and_try_again_loads(qtbot, make_window, smollm2_path):
    settings = smol_settings(smollm2_path)
    settings.save()
    LoadGuard.beside(None).begin(smollm2_path)  # what a process killed mid-load leaves behind

    window = make_window(None, wait=False)
    qtbot.waitUntil(lambda: "Try again" in _buttons(window), timeout=10_000)
    assert window.models.state == EngineState.NONE
    assert "never finished" in _notices(window)
    _buttons(window)["Try again"].click()
    qtbot.waitUntil(lambda: window.models.state == EngineState.READY, timeout=LOAD_TIMEOUT_MS)
    assert LoadGuard.beside(None).last_problem(smollm2_path) is None
    window.close()

    again = make_window(None)  # a good load clears the record: the next start loads by itself
    assert again.models.state == EngineState.READY
