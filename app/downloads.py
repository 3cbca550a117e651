"""Entry points to the model downloader and the model library view (their own modules, imported lazily)."""

from __future__ import annotations

import importlib.util

from PySide6.QtWidgets import QPushButton

MISSING_TIP = "The model downloader is not part of this build yet"


def downloader_available() -> bool:
    try:
        return importlib.util.find_spec("app.downloader") is not None
    except (ImportError, ValueError):
        return False


def download_button(text: str, tip: str) -> QPushButton:
    """A button for the downloader: disabled, saying why, when the downloader is missing."""
    button = QPushButton(text)
    available = downloader_available()
    button.setEnabled(available)
    button.setToolTip(tip if available else MISSING_TIP)
    return button


def open_downloader(parent, library, target=None):
    """Show the downloader dialog (non-modal) and return it; None when it is missing."""
    try:
        from app.downloader import DownloaderDialog
    except ImportError:
        return None
    dialog = DownloaderDialog(parent, library=library, target=target)
    dialog.show()
    return dialog


def close_downloaders(parent) -> None:
    """Close the parent's downloader dialogs (the app is closing): a running download pauses, its
    partial file kept to resume at the next start, and nothing is left running on their threads."""
    try:
        from app.downloader import DownloaderDialog
    except ImportError:
        return
    for dialog in parent.findChildren(DownloaderDialog):
        dialog.stop_tasks()
        dialog.close()


def open_library(parent, library, target=None, on_chosen=None):
    """The model library (every local GGUF) in a window; double-clicking a model calls on_chosen(entry)."""
    try:
        from app.library_view import LibraryView
    except ImportError:
        return None
    from PySide6.QtWidgets import QDialog, QLabel, QVBoxLayout

    dialog = QDialog(parent)
    dialog.setWindowTitle("Model library")
    layout = QVBoxLayout(dialog)
    layout.addWidget(QLabel("Double-click a model to chat with it (its best compatible draft is chosen too)."))
    view = LibraryView(library, dialog, target=target)
    layout.addWidget(view)
    if on_chosen is not None:
        view.entry_activated.connect(lambda entry: (on_chosen(entry), dialog.accept()))
    dialog.resize(dialog.fontMetrics().horizontalAdvance("M") * 70, dialog.fontMetrics().height() * 30)
    dialog.show()
    return dialog
