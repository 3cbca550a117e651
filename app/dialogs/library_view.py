"""The model library as a table: what is on disk, where from, and what can be done with it.

Scanning and adding read GGUF headers (a fraction of a second for a large vocabulary the first
time), so they run on a pool thread; the library object is only used by one task at a time.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.bridge.hub_tasks import BackgroundTasks
from app.dialogs.downloader import DownloaderDialog
from app.ui import file_dialogs
from app.ui.tables import add_row, human_size, make_table, selected_row
from engine.errors import EngineError, user_message
from engine.models.library import ModelEntry, ModelLibrary

COLUMNS = ["Name", "Parameters", "Quantization", "Size", "Context", "Architecture", "Vocabulary", "Source"]
SOURCE_NAMES = {"app": "Specula", "added": "added", "hf-cache": "Hugging Face cache", "lmstudio": "LM Studio"}


class LibraryView(QWidget):
    entry_activated = Signal(object)  # a ModelEntry, on double-click
    library_changed = Signal()

    def __init__(
        self,
        library: ModelLibrary,
        parent: QWidget | None = None,
        target: ModelEntry | None = None,
        loaded: dict[str, str] | None = None,
    ):
        """loaded: path -> "target" or "draft" for the models in memory now (their "loaded" badge)."""
        super().__init__(parent)
        self.library, self.target = library, target
        self.loaded = dict(loaded or {})
        self.tasks = BackgroundTasks(self, max_threads=1)  # one library task at a time
        self.entries: list[ModelEntry] = []

        self.table = make_table(COLUMNS)
        self.table.setToolTip("Every GGUF model Specula found. Double-click to use one.")
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _: self._activate())
        self.summary = QLabel()
        self.problems = QLabel()
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #b0412e;")
        self.problems.hide()

        self.add_button = _button("Add file…", "Add a GGUF file from any folder (it stays where it is).", self.add)
        self.remove_button = _button("Remove", "Delete a downloaded model, or forget an added file.", self.remove)
        self.reveal_button = _button("Show in folder", "Open the folder that holds the file.", self.reveal)
        self.rename_button = _button(
            "Rename…", "Call the selected model something else (the file is not touched).", self.rename
        )
        self.rescan_button = _button("Rescan", "Look for new or changed GGUF files.", self.rescan)
        self.download_button = _button(
            "Download…", "Find and download models from the Hugging Face hub.", self.download
        )
        buttons = QHBoxLayout()
        for b in (self.add_button, self.remove_button, self.rename_button, self.reveal_button, self.rescan_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.download_button)

        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.problems)
        layout.addLayout(buttons)
        self.rescan()

    def selected(self) -> ModelEntry | None:
        row = selected_row(self.table)
        return self.entries[row] if row is not None else None

    # -- actions --------------------------------------------------------------------------------

    def rescan(self) -> None:
        self._busy("Looking for models…")
        self.tasks.start(lambda _: self.library.scan(), self._show, self._failed)

    def add(self) -> None:
        path = file_dialogs.open_file(self, "Add a GGUF model", "GGUF models (*.gguf)")
        if path:
            self.add_path(path)

    def add_path(self, path: str | Path) -> None:
        self._busy(f"Reading {Path(path).name}…")

        def add_and_scan(_report):
            self.library.add_file(path)
            return self.library.scan()

        self.tasks.start(add_and_scan, self._show, self._failed)

    def remove(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        if entry.removable:
            question = f"Delete {entry.path.name} ({human_size(entry.file_size)}) from disk?"
            answer = QMessageBox.question(self, "Delete model", question)
            if answer != QMessageBox.StandardButton.Yes:
                return
        try:
            self.library.remove(entry)
        except EngineError as e:
            QMessageBox.warning(self, "Cannot remove", user_message(e))
            return
        except OSError as e:
            QMessageBox.warning(self, "Cannot remove", f"Could not delete {entry.path}: {e.strerror or e}")
            return
        self._show(self.library.entries)
        self.library_changed.emit()

    def rename(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        name, ok = QInputDialog.getText(self, "Rename model", "Name (empty: the name from the file):", text=entry.title)
        if ok:
            self.library.rename(entry.path, name)
            self._show(self.library.entries)

    def reveal(self) -> None:
        entry = self.selected()
        if entry is not None:
            self.library.reveal_in_file_manager(entry)

    def download(self) -> None:
        dialog = DownloaderDialog(self, self.library, self.target or self.selected())
        dialog.model_downloaded.connect(lambda _path: self.rescan())
        dialog.exec()

    # -- display --------------------------------------------------------------------------------

    def _show(self, entries: list[ModelEntry]) -> None:
        self.entries = list(entries)
        self.table.setRowCount(0)
        for e in self.entries:
            context = f"{e.context_length:,}" if e.context_length else "?"
            row = add_row(
                self.table,
                [
                    e.title + _badge(self.loaded.get(str(e.path))),
                    e.size_label,
                    e.quantization,
                    human_size(e.file_size),
                    context,
                    f"{e.architecture} ({e.chat_format_label})" if e.is_base_model else e.architecture,
                    e.vocab_fingerprint,
                    SOURCE_NAMES.get(e.source, e.source),
                ],
                numeric={1, 3, 4},
            )
            for column in range(len(COLUMNS)):
                self.table.item(row, column).setToolTip(f"{e.name}\n{e.path}" + _format_note(e))
        self.summary.setText(f"{len(self.entries)} models" if self.entries else "No models found yet.")
        problems = self.library.problems
        self.problems.setVisible(bool(problems))
        self.problems.setText(
            "Not usable: " + "; ".join(reason for _, reason in problems[:3]) + (" …" if len(problems) > 3 else "")
        )
        self.problems.setToolTip("\n".join(f"{path}: {reason}" for path, reason in problems))
        self._idle()
        self.library_changed.emit()

    def _failed(self, message: str) -> None:
        self._idle()
        QMessageBox.warning(self, "Model library", message)

    def _activate(self) -> None:
        entry = self.selected()
        if entry is not None:
            self.entry_activated.emit(entry)

    def _busy(self, text: str) -> None:
        self.summary.setText(text)
        for b in (self.add_button, self.remove_button, self.rescan_button):
            b.setEnabled(False)

    def _idle(self) -> None:
        self.add_button.setEnabled(True)
        self.rescan_button.setEnabled(True)
        self._update_buttons()

    def _update_buttons(self) -> None:
        entry = self.selected()
        idle = self.rescan_button.isEnabled()
        self.remove_button.setEnabled(idle and entry is not None and entry.source in ("app", "added"))
        self.reveal_button.setEnabled(entry is not None)
        self.rename_button.setEnabled(entry is not None)

    def closeEvent(self, event) -> None:
        self.tasks.wait()
        super().closeEvent(event)


def _badge(role: str | None) -> str:
    """The "loaded" badge after a model's name: it is in memory now, as the target or the draft."""
    return {"target": "  ● loaded", "draft": "  ● loaded (draft)"}.get(role or "", "")


def _format_note(e: ModelEntry) -> str:
    if e.chat_format == "none":
        return "\nThe file has no chat template and its family is not known: chats use ChatML, which it may not follow."
    if e.chat_format:
        return f"\nThe file has no chat template: chats use llama.cpp's format for its family ({e.chat_format})."
    return ""


def _button(text: str, tip: str, slot) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    button.clicked.connect(slot)
    return button
