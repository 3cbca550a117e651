"""The chat header's model picker, clean model names, Eject, and the offer to unload an idle draft."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton

from app.bridge.draft_offer import IDLE_ANSWERS
from app.bridge.model_controller import EngineState
from app.core.settings import ModelSettings
from engine.gguf.header import read_header
from engine.gguf.names import display_name
from engine.models.library import ModelLibrary
from tests.app_helpers import LOAD_TIMEOUT_MS, ask, make_window, smol_settings  # noqa: F401 (a fixture)


def test_starter_pair_names_are_clean(qwen_paths):
    target, draft = qwen_paths
    # The headers say "Qwen2.5 Coder 1.5B Instruct GGUF" and "… 0.5B Instruct AWQ" (a Q4_K_M file).
    assert read_header(target).name.endswith("GGUF") and read_header(draft).name.endswith("AWQ")
    assert display_name(read_header(target), target) == "Qwen2.5-Coder 1.5B Instruct"
    assert display_name(read_header(draft), draft) == "Qwen2.5-Coder 0.5B Instruct"


def test_rename_survives_a_restart(tmp_path, qwen_paths):
    target, _ = qwen_paths
    state = tmp_path / "library.json"
    library = ModelLibrary(tmp_path / "models", state, scan_external=False)
    library.add_file(target)
    library.rename(target, "  My  coder ")
    assert [e.title for e in library.scan() if str(e.path) == target] == ["My coder"]
    again = ModelLibrary(tmp_path / "models", state, scan_external=False)
    entry = again.add_file(target)
    assert entry.title == "My coder" and entry.quantization == "Q4_K_M"
    assert again.user_name(target) == "My coder"
    again.rename(target, "")
    assert ModelLibrary(tmp_path / "models", state, scan_external=False).add_file(target).title == (
        "Qwen2.5-Coder 1.5B Instruct"
    )


def _combo_paths(combo) -> list[str]:
    return [str(combo.itemData(i).path) for i in range(combo.count()) if hasattr(combo.itemData(i), "path")]


def test_picker_offers_only_compatible_drafts_and_loads_the_choice(qtbot, make_window, qwen_paths, smollm2_path):
    target, draft = qwen_paths
    window = make_window(smol_settings(str(target), draft=ModelSettings("")))
    assert window.models.state == EngineState.READY
    for path in (target, draft, smollm2_path):
        window.models.library.add_file(path)
    window.models.library.rename(target, "Coder big")  # used by the next load
    window._update_picker()
    picker = window.header.model_picker
    qtbot.waitUntil(lambda: len(_combo_paths(picker.target_combo)) == 3, timeout=30_000)
    assert picker.target_combo.currentText() == "Coder big · Q4_K_M"  # the rename, quantization as a badge
    # SmolLM2 has another vocabulary: never offered as a draft for the Qwen target.
    assert _combo_paths(picker.draft_combo) == [str(draft)]
    offered = window.models.library.draft_choices(window.models.entry(window.settings.target.path)).offered
    assert [e.path for e in picker.offered_drafts()] == [e.path for e in offered]
    # Choosing the draft loads it, and the status bar follows.
    picker.draft_combo.setCurrentIndex(1)
    picker.draft_combo.activated.emit(1)
    qtbot.waitUntil(
        lambda: window.models.state == EngineState.READY and window.models.info.draft_name is not None,
        timeout=LOAD_TIMEOUT_MS,
    )
    assert window.models.info.target_name == "Coder big"
    assert window.models.info.draft_name == "Qwen2.5-Coder 0.5B Instruct"
    assert "draft Qwen2.5-Coder 0.5B Instruct" in window.status.models.text()
    assert window.models.loaded_models() == {str(target): "target", str(draft): "draft"}
    assert window.header.model_picker.eject_draft_action.isEnabled()

    # Eject the draft: the target stays.
    window.session.eject("draft")
    qtbot.waitUntil(lambda: window.models.info.draft_name is None, timeout=30_000)
    assert window.models.state == EngineState.READY and window.settings.draft.path == ""
    assert "no draft model" in window.status.models.text()
    assert window.models.loaded_models() == {str(target): "target"}
    # Eject the target: nothing is loaded.
    window.session.eject("target")
    assert window.models.state == EngineState.NONE and window.models.loaded_models() == {}
    qtbot.waitUntil(lambda: window.host.worker.engine is None, timeout=30_000)
    assert not window.header.model_picker.eject_button.isEnabled()


def test_library_shows_loaded_badge(qtbot, isolated_home, smollm2_path):
    from app.dialogs.library_view import LibraryView

    library = ModelLibrary(scan_external=False)
    library.add_file(smollm2_path)
    view = LibraryView(library, loaded={str(smollm2_path): "target"})
    qtbot.addWidget(view)
    qtbot.waitUntil(lambda: view.table.rowCount() == 1, timeout=30_000)
    assert view.table.item(0, 0).text() == "SmolLM2 135M 8k lc100k mix1 ep2  ● loaded"
    view.tasks.wait()


def test_unload_offer_after_idle_drafting(qtbot, make_window, smollm2_path):
    # Lookup only: the draft model (SmolLM2 drafting for itself) is loaded but never drafts.
    window = make_window(smol_settings(smollm2_path, max_tokens=8, drafter_mode="lookup"))
    assert window.models.info.draft_name is not None and window.models.info.draft_memory_bytes > 0
    for i in range(IDLE_ANSWERS):
        ask(qtbot, window, f"Say {i}")
    offers = [n for n in window.chat_view.notices if "Unload the draft model" in n.text()]
    assert len(offers) == 1 and "GB" in offers[0].text()
    button = next(b for b in offers[0].findChildren(QToolButton) if b.text() == "Unload draft model")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.models.info.draft_name is None, timeout=30_000)
    assert window.host.worker.engine.draft is None
