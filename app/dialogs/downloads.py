"""Opening the model downloader and the model library view, each in its own window.

Both are imported when first opened: the hub client behind them costs half a second at start."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QDialog, QLabel, QPushButton, QVBoxLayout


def download_button(text: str, tip: str) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    return button


def open_downloader(parent, library, target=None):
    """Show the downloader dialog (non-modal) and return it."""
    from app.dialogs.downloader import DownloaderDialog

    dialog = DownloaderDialog(parent, library=library, target=target)
    dialog.show()
    return dialog


def close_downloaders(parent) -> None:
    """Close the parent's downloader dialogs (the app is closing): a running download pauses, its
    partial file kept to resume at the next start, and nothing is left running on their threads."""
    if "app.dialogs.downloader" not in sys.modules:
        return  # never opened
    from app.dialogs.downloader import DownloaderDialog

    for dialog in parent.findChildren(DownloaderDialog):
        dialog.stop_tasks()
        dialog.close()


def open_library(parent, library, target=None, on_chosen=None, loaded=None) -> QDialog:
    """The model library (every local GGUF) in a window; double-clicking a model calls on_chosen(entry)."""
    from app.dialogs.library_view import LibraryView

    dialog = QDialog(parent)
    dialog.setWindowTitle("Model library")
    layout = QVBoxLayout(dialog)
    layout.addWidget(QLabel("Double-click a model to chat with it (its best compatible draft is chosen too)."))
    view = LibraryView(library, dialog, target=target, loaded=loaded)
    layout.addWidget(view)
    if on_chosen is not None:
        view.entry_activated.connect(lambda entry: (on_chosen(entry), dialog.accept()))
    dialog.resize(dialog.fontMetrics().horizontalAdvance("M") * 70, dialog.fontMetrics().height() * 30)
    dialog.show()
    return dialog
