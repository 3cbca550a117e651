"""Model pickers and settings: only compatible drafts are offered, and settings survive a restart."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import threading
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QPlainTextEdit, QPushButton, QSpinBox

import engine.models.library
from app.bridge.model_controller import EngineState
from app.core.settings import ModelSettings, Settings
from app.dialogs.settings_dialog import NONE_LABEL, SettingsDialog
from engine.models.library import ModelLibrary
from tests.app_helpers import make_window, smol_settings  # noqa: F401 (a fixture)


@pytest.fixture
def library(tmp_path, qwen_paths, smollm2_path):
    """A library whose folder holds the Qwen pair and SmolLM2 (links to the test models)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for path in (*qwen_paths, smollm2_path):
        (folder / Path(path).name).symlink_to(path)
    return ModelLibrary(models_dir=folder, state_file=tmp_path / "library.json", scan_external=False)


def linked(library, path) -> str:
    return str(library.models_dir / Path(path).name)


def open_settings(qtbot, settings, library) -> SettingsDialog:
    """The dialog, once its model lists arrived from the pool thread that reads the library."""
    dialog = SettingsDialog(settings, library)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.models_ready, timeout=30_000)
    return dialog


def test_only_compatible_drafts_are_offered_and_the_rest_say_why(qtbot, library, qwen_paths, smollm2_path):
    target, draft = (linked(library, p) for p in qwen_paths)
    smol = linked(library, smollm2_path)
    dialog = open_settings(qtbot, Settings(target=ModelSettings(target)), library)
    assert dialog.target_combo.currentData() == target
    assert dialog.draft_combo.itemText(0) == NONE_LABEL
    assert dialog.offered_drafts() == [draft]
    assert smol not in dialog.offered_drafts()
    hidden = dialog.hidden_label.text()
    assert "SmolLM2 135M" in hidden and "vocabulary" in hidden


def test_the_library_is_read_off_the_gui_thread_and_the_target_header_once(qtbot, library, qwen_paths, monkeypatch):
    reads = []  # (file name, read on the GUI thread?)
    real = engine.models.library.read_header

    def recording(path):
        reads.append((Path(path).name, threading.current_thread() is threading.main_thread()))
        return real(path)

    monkeypatch.setattr(engine.models.library, "read_header", recording)
    engine.models.library._vocab.cache_clear()
    target, draft = (linked(library, p) for p in qwen_paths)
    dialog = SettingsDialog(Settings(target=ModelSettings(target)), library)
    qtbot.addWidget(dialog)
    assert not dialog.models_ready and dialog.result_settings().target.path == target  # open at once, choice kept
    qtbot.waitUntil(lambda: dialog.models_ready, timeout=30_000)
    assert dialog.offered_drafts() == [draft]
    for choice in (draft, target):  # change the target, and back
        dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(choice))
        qtbot.waitUntil(lambda: dialog.models_ready, timeout=30_000)
    assert dialog.offered_drafts() == [draft]

    assert reads and [name for name, on_gui in reads if on_gui] == []
    # Once for the library's summary, once for the vocabulary the draft check compares: not per candidate.
    assert [name for name, _ in reads].count(Path(target).name) == 2


def test_an_incompatible_draft_file_is_refused_with_the_reason(qtbot, library, qwen_paths, smollm2_path):
    target = linked(library, qwen_paths[0])
    dialog = open_settings(qtbot, Settings(target=ModelSettings(target)), library)
    assert not dialog.use_draft_file(smollm2_path)
    assert dialog.draft_note.isVisibleTo(dialog)
    assert "cannot be used" in dialog.draft_note.text() and "token" in dialog.draft_note.text()
    assert smollm2_path not in dialog.offered_drafts()
    assert dialog.use_draft_file(qwen_paths[1])  # the compatible one is accepted
    assert dialog.result_settings().draft.path == qwen_paths[1]


def test_a_stale_incompatible_draft_in_the_settings_is_explained(qtbot, library, qwen_paths, smollm2_path):
    target = linked(library, qwen_paths[0])
    dialog = open_settings(qtbot, Settings(target=ModelSettings(target), draft=ModelSettings(smollm2_path)), library)
    assert dialog.draft_combo.currentData() == ""  # falls back to none
    assert "cannot be used with this target" in dialog.hidden_label.text()


def test_every_control_has_a_tooltip(qtbot, library):
    dialog = SettingsDialog(Settings(), library)
    qtbot.addWidget(dialog)
    controls = [
        w
        for kind in (QComboBox, QSpinBox, QDoubleSpinBox, QPlainTextEdit, QPushButton)
        for w in dialog.findChildren(kind)
        if w.parent() is not None and not isinstance(w.parent(), QSpinBox | QDoubleSpinBox)
    ]
    assert len(controls) >= 17
    missing = [type(w).__name__ + ":" + (w.text() if hasattr(w, "text") else "") for w in controls if not w.toolTip()]
    assert missing == []


def test_settings_survive_a_restart(qtbot, make_window, smollm2_path, isolated_home):
    window = make_window(smol_settings(smollm2_path))
    dialog = SettingsDialog(window.settings, window.models.library)
    qtbot.addWidget(dialog)
    dialog.temperature.setValue(0.35)
    dialog.top_p.setValue(0.8)
    dialog.top_k.setValue(12)
    dialog.min_p.setValue(0.1)
    dialog.max_tokens.setValue(333)
    dialog.seed.setValue(1234)
    dialog.system_prompt.setPlainText("Answer in French.")
    dialog.mode.setCurrentIndex(dialog.mode.findData("lookup"))
    dialog.draft_length.setValue(5)
    dialog.context.setValue(1536)
    dialog.target_threads.setValue(1)
    chosen = dialog.result_settings()
    window.apply_settings(chosen)  # the context changed: the models reload
    qtbot.waitUntil(
        lambda: window.models.state == EngineState.READY and window.models.info.n_ctx == 1536, timeout=120_000
    )
    assert window.models.info.n_threads == 1
    window.close()

    again = make_window()  # reads settings.json from the data folder
    assert again.settings.temperature == 0.35 and again.settings.top_k == 12 and again.settings.seed == 1234
    assert again.settings.system_prompt == "Answer in French." and again.settings.drafter_mode == "lookup"
    assert again.settings.draft_length == 5 and again.settings.context_size == 1536
    assert again.settings.max_tokens == 333 and again.settings.min_p == 0.1 and again.settings.top_p == 0.8
    assert again.settings.target.path == smollm2_path and again.settings.target.threads == 1
    assert (isolated_home / "settings.json").is_file()


def test_choosing_a_model_from_the_library_reads_no_header_on_the_gui_thread(
    qtbot, make_window, smollm2_path, qwen_paths, monkeypatch
):
    window = make_window(smol_settings(smollm2_path))
    folder = window.models.library.models_dir
    folder.mkdir(parents=True, exist_ok=True)
    for path in qwen_paths:
        (folder / Path(path).name).symlink_to(path)
    entries = {e.path.name: e for e in window.models.library.scan()}
    target, draft = (entries[Path(p).name] for p in qwen_paths)
    on_gui = []
    real = engine.models.library.read_header
    monkeypatch.setattr(
        engine.models.library,
        "read_header",
        lambda path: (on_gui.append(threading.current_thread() is threading.main_thread()), real(path))[1],
    )
    engine.models.library._vocab.cache_clear()

    window.models.use_model(target)  # as a double-click in the model library does
    qtbot.waitUntil(lambda: window.settings.target.path == str(target.path), timeout=30_000)
    assert window.settings.draft.path == str(draft.path)  # the compatible draft was found...
    assert on_gui and not any(on_gui)  # ...from vocabularies read on a pool thread


def test_a_compatible_draft_chosen_outside_the_library_is_kept(qtbot, tmp_path, qwen_paths):
    folder = tmp_path / "only-the-target"
    folder.mkdir()
    target = folder / Path(qwen_paths[0]).name
    target.symlink_to(qwen_paths[0])
    library = ModelLibrary(models_dir=folder, state_file=tmp_path / "library.json", scan_external=False)
    outside = qwen_paths[1]  # as settings.json may name it: a compatible draft the library has not seen
    dialog = open_settings(qtbot, Settings(target=ModelSettings(str(target)), draft=ModelSettings(outside)), library)
    assert dialog.draft_combo.currentData() == outside
    assert "cannot be used" not in dialog.hidden_label.text()
    assert dialog.result_settings().draft.path == outside


def test_gpu_layers_read_auto_all_or_a_count_and_the_gpu_line_never_loads_a_driver(qtbot, library, qwen_paths):
    from app.dialogs.settings_dialog import GpuLayersBox
    from engine.config import GPU_LAYERS_ALL, GPU_LAYERS_AUTO
    from engine.llama import backends

    target = linked(library, qwen_paths[0])
    settings = Settings(target=ModelSettings(target, gpu_layers=GPU_LAYERS_AUTO))
    dialog = open_settings(qtbot, settings, library)
    box = dialog.target_gpu
    assert isinstance(box, GpuLayersBox) and box.text() == "auto"
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "all")
    box.interpretText()
    assert box.value() == GPU_LAYERS_ALL and box.text() == "all"
    box.setValue(12)
    assert box.text() == "12"
    assert dialog.result_settings().target.gpu_layers == 12
    # The GPU line says what the engine found, or that it looks when a model loads: never probed here.
    found = backends.loaded()
    assert dialog.device.text() == (found.summary() if found else "the GPU is detected when a model first loads")
