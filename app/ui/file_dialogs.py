"""The app's open-file and choose-folder dialogs: they start where the user last chose something (in this
run), else in the home folder. Qt's own dialog, used where the desktop offers no native one, would start
in the working directory, which for a double-clicked app is / or the bundle's folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

_last_folder: Path | None = None


def start_folder() -> str:
    return str(_last_folder if _last_folder is not None and _last_folder.is_dir() else Path.home())


def _remember(path: str) -> None:
    global _last_folder
    chosen = Path(path)
    _last_folder = chosen if chosen.is_dir() else chosen.parent


def open_file(parent: QWidget | None, caption: str, filters: str = "") -> str:
    """A file the user chose ("" if none)."""
    path, _ = QFileDialog.getOpenFileName(parent, caption, start_folder(), filters)
    if path:
        _remember(path)
    return path


def open_files(parent: QWidget | None, caption: str, filters: str = "") -> list[str]:
    """The files the user chose ([] if none)."""
    paths, _ = QFileDialog.getOpenFileNames(parent, caption, start_folder(), filters)
    if paths:
        _remember(paths[0])
    return paths


def existing_folder(parent: QWidget | None, caption: str) -> str:
    """A folder the user chose ("" if none)."""
    folder = QFileDialog.getExistingDirectory(parent, caption, start_folder())
    if folder:
        _remember(folder)
    return folder
