"""The app's file dialogs open in the home folder, then where the user last chose something (Qt's own
dialog would open in the working directory: / or the bundle for a double-clicked app). Real dialogs,
answered as a user would once they show."""

from pathlib import Path

from app.ui import file_dialogs


def answer_when_shown(qtbot, seen: list[str], choose: Path | None) -> None:
    """Once the modal dialog shows, note the folder it opened in, then choose `choose` (None: Cancel)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QFileDialog, QLineEdit

    def act() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QFileDialog):
            QTimer.singleShot(50, act)
            return
        seen.append(dialog.directory().absolutePath())
        if choose is None:
            dialog.reject()
        else:  # typed into the file name box, as a user may
            dialog.findChild(QLineEdit, "fileNameEdit").setText(str(choose))
            dialog.accept()

    QTimer.singleShot(50, act)


def test_dialogs_open_at_home_then_where_the_user_last_chose(qtbot, tmp_path, monkeypatch):
    home, documents = tmp_path / "home", tmp_path / "documents"
    home.mkdir()
    documents.mkdir()
    (documents / "notes.txt").write_text("Thursday, room Orchid.\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(file_dialogs, "_last_folder", None)
    monkeypatch.chdir(tmp_path)  # where Qt's dialog would open by itself
    seen: list[str] = []

    answer_when_shown(qtbot, seen, documents / "notes.txt")
    assert file_dialogs.open_file(None, "Attach files") == str(documents / "notes.txt")
    answer_when_shown(qtbot, seen, None)
    assert file_dialogs.existing_folder(None, "Add a folder to the collection") == ""
    assert seen == [str(home), str(documents)]
