"""The library table under pytest-qt, on real GGUF files."""

from PySide6.QtWidgets import QMessageBox

from app.dialogs.library_view import LibraryView
from engine.models.library import ModelLibrary

WAIT_MS = 20_000  # an upper bound for slow machines, not a performance claim


def test_lists_models_and_problems_and_removes_a_download(qtbot, tmp_path, smollm2_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    (models / "smol.gguf").symlink_to(smollm2_path)
    (models / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    view = LibraryView(ModelLibrary(models, tmp_path / "library.json", scan_external=False))
    qtbot.addWidget(view)
    qtbot.waitUntil(lambda: view.table.rowCount() == 1, timeout=WAIT_MS)

    cells = [view.table.item(0, c).text() for c in range(view.table.columnCount())]
    assert cells[1:5] == ["135M", "Q4_1", "98.4 MB", "8,192"]
    assert cells[7] == "Specula"
    assert view.problems.isVisibleTo(view) and "cut off" in view.problems.text()

    view.table.selectRow(0)
    assert view.remove_button.isEnabled()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    view.remove()
    assert view.table.rowCount() == 0
    assert not (models / "smol.gguf").exists()
