"""The app with a base model (Gemma 3 270M: no chat template in its file) and a per-model format override."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from app.settings import ModelSettings, Settings
from tests.app_helpers import make_window  # noqa: F401 (a fixture)


def gemma_settings(path: str, **changes) -> Settings:
    return Settings(target=ModelSettings(path), context_size=1024, temperature=0.0, max_tokens=16, **changes)


def notices_about_base_models(window) -> list[str]:
    return [n.text() for n in window.chat_view.notices if "base model" in n.text()]


def test_a_base_model_gets_its_familys_format_and_a_notice_once(qtbot, make_window, gemma3_path):
    window = make_window(gemma_settings(gemma3_path))
    assert window.engine_state == "ready"
    qtbot.waitUntil(lambda: window.chat_format is not None, timeout=10_000)
    assert window.chat_format.source == "family" and window.chat_format.base_model
    qtbot.waitUntil(lambda: bool(notices_about_base_models(window)), timeout=5_000)
    (text,) = notices_about_base_models(window)
    assert "Gemma" in text
    assert gemma3_path in window.settings.base_model_notices
    window.close()
    # The next start (settings read back from the data folder) says nothing more.
    again = make_window(None)
    qtbot.waitUntil(lambda: again.chat_format is not None, timeout=10_000)
    qtbot.wait(200)
    assert notices_about_base_models(again) == []


def test_a_format_chosen_in_settings_is_used_and_remembered_for_that_file(qtbot, make_window, gemma3_path):
    window = make_window(gemma_settings(gemma3_path))
    qtbot.waitUntil(lambda: window.chat_format is not None, timeout=10_000)
    new = gemma_settings(gemma3_path, chat_templates={gemma3_path: "chatml"})
    window.apply_settings(new)
    qtbot.waitUntil(lambda: window.chat_format.source == "override", timeout=10_000)
    assert "ChatML" in window.chat_format.description
    assert window.engine_state == "ready", "a format change does not reload the model"
    assert Settings.load(window.settings_path).chat_templates == {gemma3_path: "chatml"}
