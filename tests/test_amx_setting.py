"""The AMX decision reaches the user: a setting that travels to the engine, and the status bar."""

from __future__ import annotations

import pytest

from app.core.settings import ModelSettings, Settings
from app.dialogs.settings_dialog import SettingsDialog
from app.ui.status_bar import StatusBar
from engine.decoding.chat_engine import EngineInfo
from engine.llama import cpu_weights
from engine.models.library import ModelLibrary


def test_the_setting_reaches_both_models_and_reloads_them(tmp_path):
    settings = Settings(target=ModelSettings("t.gguf"), draft=ModelSettings("d.gguf"))
    assert not settings.target_spec().allow_amx and not settings.draft_spec().allow_amx
    allowed = Settings(target=ModelSettings("t.gguf"), draft=ModelSettings("d.gguf"), allow_amx=True)
    assert allowed.target_spec().allow_amx and allowed.draft_spec().allow_amx
    assert allowed.load_key() != settings.load_key()
    allowed.save(tmp_path / "settings.json")
    assert Settings.load(tmp_path / "settings.json").allow_amx


@pytest.mark.parametrize("offered", [{"AMX": 1, "CPU_REPACK": 2}, {"CPU_REPACK": 2}])
def test_the_checkbox_is_offered_only_where_llama_cpp_would_use_amx(qtbot, tmp_path, monkeypatch, offered):
    monkeypatch.setattr(cpu_weights, "offered_buffers", lambda: offered)
    library = ModelLibrary(models_dir=tmp_path, state_file=tmp_path / "library.json", scan_external=False)
    dialog = SettingsDialog(Settings(allow_amx=False), library)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.models_ready, timeout=30_000)  # its library read has ended
    assert dialog.amx.isEnabled() == ("AMX" in offered)
    assert cpu_weights.AMX_ISSUE in dialog.amx.toolTip() or "AMX" not in offered
    if dialog.amx.isEnabled():
        dialog.amx.setChecked(True)
        assert dialog.result_settings().allow_amx


def engine_info(amx: str, summary: str) -> EngineInfo:
    return EngineInfo("Qwen", None, "CPU", 0, 28, 0, 4096, 2, 10**9, {}, cpu_weights=summary, amx=amx)


@pytest.mark.parametrize(("amx", "shown"), [("avoided", "AMX off"), ("on", "AMX on"), ("none", None)])
def test_the_status_bar_says_what_was_decided(qtbot, amx, shown):
    bar = StatusBar()
    qtbot.addWidget(bar)
    bar.set_engine(engine_info(amx, f"CPU weights: {amx}"))
    if shown:
        assert shown in bar.backend.text()
    else:
        assert "AMX" not in bar.backend.text()
    assert f"CPU weights: {amx}" in bar.backend.toolTip()
    bar.set_engine(None)
    assert "CPU weights" not in bar.backend.toolTip()
