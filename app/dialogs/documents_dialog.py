"""The Documents window: your collections of folders and files, what is indexed, and indexing itself.

On the left the collections (New…, Remove); on the right the chosen one's folders and files (Add
folder…, Add files…, or drop them here; Remove), what its index holds, and the files that could not
be read, each with its reason. Update reads what is new or changed and drops what is gone, with a
progress bar (files, passages, rate, time left), Pause and Cancel. Everything that touches the
index runs on the library's own thread (app.bridge.documents_service); this window only asks and shows.
Removing anything here never touches your files: only what Specula read of them.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from app.bridge.documents_service import CollectionSummary, DocumentsService
from app.ui import file_dialogs, theme
from engine.documents import indexer
from engine.documents.library import DEFAULT_PASSAGES, MAX_PASSAGES


class DocumentsDialog(QDialog):
    download_embedding_model = Signal()  # the user asks for the downloader, opened on embedding models

    def __init__(self, service: DocumentsService, parent: QWidget | None = None):
        super().__init__(parent)
        self.service = service
        self.summaries: list[CollectionSummary] = []
        # A collection just created, to be selected once the library lists it: the next "Add folder…"
        # goes to the selected collection, and it must be the new one, not the one selected before.
        self._created: str | None = None
        self.setWindowTitle("Documents")
        self.setAcceptDrops(True)
        self.resize(860, 520)

        self.collections = QListWidget()
        self.collections.setAccessibleName("Collections")
        self.collections.currentRowChanged.connect(self._show_current)
        new_button = QPushButton("&New…")
        new_button.clicked.connect(self.new_collection)
        self.remove_collection_button = QPushButton("Remove")
        self.remove_collection_button.setToolTip("Forget this collection and its index (your files stay as they are)")
        self.remove_collection_button.clicked.connect(self.remove_collection)
        left = QVBoxLayout()
        left.addWidget(QLabel("<b>Collections</b>"))
        left.addWidget(self.collections, 1)
        row = QHBoxLayout()
        row.addWidget(new_button)
        row.addWidget(self.remove_collection_button)
        left.addLayout(row)

        self.figures = QLabel()
        self.figures.setWordWrap(True)
        self.sources = QListWidget()
        self.sources.setAccessibleName("Folders and files")
        add_folder = QPushButton("Add &folder…")
        add_folder.clicked.connect(self.add_folder)
        add_files = QPushButton("Add f&iles…")
        add_files.clicked.connect(self.add_files)
        self.remove_source_button = QPushButton("Remove")
        self.remove_source_button.setToolTip("Leave this folder or file out of the collection (it stays on disk)")
        self.remove_source_button.clicked.connect(self.remove_source)
        self.update_button = QPushButton("&Update index")
        self.update_button.setToolTip("Read what is new or changed in these folders and files; drop what is gone")
        self.update_button.clicked.connect(self.update_index)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setWordWrap(True)
        theme.tint(self.progress_label)
        self.failure_label = QLabel()
        self.failure_label.setWordWrap(True)
        self.failure_label.setVisible(False)
        theme.tint(self.failure_label, theme.error_colour)
        self.pause_button = QPushButton("&Pause")
        self.pause_button.clicked.connect(self.toggle_pause)
        self.cancel_button = QPushButton("&Cancel")
        self.cancel_button.setToolTip("Stop indexing; what was read so far is kept")
        self.cancel_button.clicked.connect(service.cancel)
        self.errors = QListWidget()
        self.errors.setAccessibleName("Files that could not be read")
        self.errors.setWordWrap(True)  # a reason says what to do (save as .docx…): read whole, not scrolled to
        theme.tint(self.errors, theme.error_colour)
        self.errors_label = QLabel("<b>Could not be read</b>")

        right = QVBoxLayout()
        right.addWidget(self.figures)
        right.addWidget(self.sources, 2)
        row = QHBoxLayout()
        for button in (add_folder, add_files, self.remove_source_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.update_button)
        right.addLayout(row)
        row = QHBoxLayout()
        row.addWidget(self.progress, 1)
        row.addWidget(self.pause_button)
        row.addWidget(self.cancel_button)
        right.addLayout(row)
        right.addWidget(self.progress_label)
        right.addWidget(self.failure_label)
        right.addWidget(self.errors_label)
        right.addWidget(self.errors, 1)

        body = QHBoxLayout()
        body.addLayout(left, 1)
        body.addLayout(right, 2)
        layout = QVBoxLayout(self)
        hint = QLabel(
            "Chats answer from the collections ticked in their Documents menu (beside Attach…). Only this computer reads "
            "your files; Specula never changes them."
        )
        hint.setWordWrap(True)
        theme.tint(hint)
        layout.addWidget(hint)
        layout.addLayout(body, 1)
        # Meaning search (hybrid with keywords) needs an embedding model; keywords need nothing.
        self.embedding_label = QLabel()
        self.embedding_label.setWordWrap(True)
        choose_model = QPushButton("Choose embedding model…")
        choose_model.setToolTip(
            "A GGUF embedding model (e.g. nomic-embed-text-v1.5): questions then find passages by meaning too"
        )
        choose_model.clicked.connect(self.choose_embedding_model)
        download_model = QPushButton("Download one…")
        download_model.setToolTip("Find an embedding model in the downloader (needs an internet connection)")
        download_model.clicked.connect(self.download_embedding_model)
        self.no_model_button = QPushButton("Keywords only")
        self.no_model_button.clicked.connect(lambda: service.set_embedding_model(None))
        row = QHBoxLayout()
        row.addWidget(self.embedding_label, 1)
        row.addWidget(choose_model)
        row.addWidget(download_model)
        row.addWidget(self.no_model_button)
        layout.addLayout(row)
        # Reordering what a search found with a small chat model: better passages, seconds on a CPU.
        self.reranking_label = QLabel()
        self.reranking_label.setWordWrap(True)
        choose_reranker = QPushButton("Choose reranking model…")
        choose_reranker.setToolTip(
            "A small GGUF chat model (the draft model will do): it reads the best passages found and puts the ones "
            "that answer the question first. About a second a passage on a CPU, a fraction on a GPU."
        )
        choose_reranker.clicked.connect(self.choose_reranking_model)
        self.no_reranker_button = QPushButton("Don't rerank")
        self.no_reranker_button.clicked.connect(lambda: service.set_reranking_model(None))
        row = QHBoxLayout()
        row.addWidget(self.reranking_label, 1)
        row.addWidget(choose_reranker)
        row.addWidget(self.no_reranker_button)
        layout.addLayout(row)
        # How many passages go before a question: more for a large model and context, fewer for a small one.
        self.passages_box = QSpinBox()
        self.passages_box.setRange(1, MAX_PASSAGES)
        self.passages_box.setValue(service.passages_per_question())
        self.passages_box.setToolTip(
            "The best passages found go before the question, up to this many, as many as fit the model's context "
            f"(the context meter counts them). A small model loses its way in more than about {DEFAULT_PASSAGES}; "
            f"all {MAX_PASSAGES} found are drafted from either way."
        )
        self.passages_box.valueChanged.connect(service.set_passages_per_question)
        row = QHBoxLayout()
        row.addWidget(QLabel("Passages before each question, at most"), 1)
        row.addWidget(self.passages_box)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

        service.summaries_ready.connect(self.show_summaries)
        service.progress.connect(self.show_progress)
        service.indexed.connect(self.show_indexed)
        service.vector_progress.connect(self.show_vector_progress)
        service.failed.connect(self.show_failure)
        service.paused_changed.connect(self._show_paused)
        self._set_running(service.indexing)
        self._show_embedding_model()
        self._show_reranking_model()
        service.refresh()

    # -- what the service says ------------------------------------------------------------------

    @Slot(object)
    def show_summaries(self, summaries: list[CollectionSummary]) -> None:
        names = [s.name for s in summaries]
        current = self.current_name()
        if self._created in names:
            current, self._created = self._created, None
        self.summaries = summaries
        self.collections.blockSignals(True)
        self.collections.clear()
        for s in summaries:
            self.collections.addItem(s.name)
        self.collections.blockSignals(False)
        self.collections.setCurrentRow(names.index(current) if current in names else (0 if names else -1))
        self._show_current()
        self._show_embedding_model()
        self._show_reranking_model()

    def _show_embedding_model(self) -> None:
        path = self.service.embedding_model()
        self.embedding_label.setText(
            f"Search: keywords and meaning ({os.path.basename(path)})"
            if path
            else "Search: keywords (choose an embedding model to find passages by meaning too)"
        )
        self.embedding_label.setToolTip(path)
        self.no_model_button.setEnabled(bool(path))

    def _show_reranking_model(self) -> None:
        path = self.service.reranking_model()
        self.reranking_label.setText(
            f"Passages found are reordered by {os.path.basename(path)} (seconds a question on a CPU)"
            if path
            else "Passages in the search's order (a small chat model can reorder them: slower, often better)"
        )
        self.reranking_label.setToolTip(path)
        self.no_reranker_button.setEnabled(bool(path))

    def choose_reranking_model(self) -> None:
        path = file_dialogs.open_file(self, "Reranking model", "GGUF models (*.gguf)")
        if path:
            self.service.set_reranking_model(path)

    def choose_embedding_model(self) -> None:
        path = file_dialogs.open_file(self, "Embedding model", "GGUF models (*.gguf)")
        if path:
            self.service.set_embedding_model(path)

    @Slot(str, object)
    def show_progress(self, name: str, p: indexer.Progress) -> None:
        self._set_running(name)
        self.progress.setMaximum(max(p.bytes_total, 1))
        self.progress.setValue(min(p.bytes_done, p.bytes_total))
        left = f", about {_duration(p.seconds_left)} left" if p.seconds_left is not None else ""
        paused = " — paused" if self.service.paused else ""
        self.progress_label.setText(
            f"{name}: {p.files_done:,} of {p.files_total:,} files, {p.passages:,} passages, "
            f"{p.mb_per_minute:.1f} MB/min{left}{paused}"
        )
        self.progress_label.setToolTip(p.current)

    @Slot(str, object)
    def show_vector_progress(self, name: str, p) -> None:
        self._set_running(name)
        self.progress.setMaximum(max(p.total, 1))
        self.progress.setValue(min(p.done, p.total))
        left = f", about {_duration(p.seconds_left)} left" if p.seconds_left is not None else ""
        self.progress_label.setText(
            f"{name}: embedding passages for meaning search, {p.done:,} of {p.total:,} ({p.per_second:.1f}/s{left})"
        )

    @Slot(str, object)
    def show_indexed(self, name: str, report: indexer.Report) -> None:
        self._set_running(None)
        what = "stopped" if report.cancelled else "up to date"
        self.progress_label.setText(
            f"{name}: {what} — {report.read} read, {report.unchanged} unchanged, {report.dropped} dropped"
            + (f", {len(report.errors)} could not be read" if report.errors else "")
        )

    @Slot(str)
    def show_failure(self, why: str) -> None:
        """In the window, in the error colour (not a modal box: it may come from work in the background)."""
        self._set_running(self.service.indexing)
        self.failure_label.setText(why)
        self.failure_label.setVisible(True)

    # -- the user's requests --------------------------------------------------------------------

    def current_name(self) -> str | None:
        item = self.collections.currentItem()
        return item.text() if item else None

    def current(self) -> CollectionSummary | None:
        name = self.current_name()
        return next((s for s in self.summaries if s.name == name), None)

    def new_collection(self) -> None:
        name, ok = QInputDialog.getText(self, "New collection", "Name (e.g. Notes, Manuals, Project X):")
        name = name.strip()
        if ok and name:
            if name in [s.name for s in self.summaries]:
                QMessageBox.information(self, "Documents", f"There is already a collection named {name!r}.")
                return
            self._created = name
            self.service.add_collection(name)

    def remove_collection(self) -> None:
        if (name := self.current_name()) is None:
            return
        asked = QMessageBox.question(
            self, "Remove collection", f"Remove the collection {name!r} and its index? Your files stay as they are."
        )
        if asked == QMessageBox.StandardButton.Yes:
            self.service.remove_collection(name)

    def add_folder(self) -> None:
        folder = file_dialogs.existing_folder(self, "Add a folder to the collection")
        if folder:
            self.add_paths([folder])

    def add_files(self) -> None:
        files = file_dialogs.open_files(self, "Add files to the collection")
        if files:
            self.add_paths(files)

    def add_paths(self, paths: list[str]) -> None:
        """Add folders or files to the current collection (a new one named after the first, if none), then index."""
        name = self.current_name()
        if name is None:
            name = os.path.basename(os.path.normpath(paths[0])) or "Documents"
            self._created = name
            self.service.add_collection(name)
        self.service.add_sources(name, paths)
        self.service.update(name)

    def remove_source(self) -> None:
        item = self.sources.currentItem()
        if item is not None and (name := self.current_name()) is not None:
            self.service.remove_source(name, item.data(Qt.ItemDataRole.UserRole))

    def update_index(self) -> None:
        self.failure_label.setVisible(False)
        if (name := self.current_name()) is not None:
            self._set_running(name)
            self.service.update(name)

    def toggle_pause(self) -> None:
        if self.service.paused:
            self.service.resume()
        else:
            self.service.pause()

    # -- drops ----------------------------------------------------------------------------------

    def dragEnterEvent(self, event) -> None:
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.add_paths(paths)
            event.acceptProposedAction()

    # -- showing --------------------------------------------------------------------------------

    def _show_current(self, *_args) -> None:
        s = self.current()
        self.sources.clear()
        self.errors.clear()
        for widget in (self.remove_collection_button, self.remove_source_button):
            widget.setEnabled(s is not None)
        if s is None:
            self.figures.setText("No collection yet: New…, or drop a folder here.")
            self.update_button.setEnabled(False)
            self.errors_label.setVisible(False)
            self.errors.setVisible(False)
            return
        files = "1 file" if s.files == 1 else f"{s.files:,} files"
        passages = "1 passage" if s.passages == 1 else f"{s.passages:,} passages"
        self.figures.setText(f"<b>{s.name}</b>: {files} indexed, {passages}")
        for path in s.sources:
            icon = QStyle.StandardPixmap.SP_DirIcon if os.path.isdir(path) else QStyle.StandardPixmap.SP_FileIcon
            item = QListWidgetItem(self.style().standardIcon(icon), path)
            item.setData(Qt.ItemDataRole.UserRole, path)
            if not os.path.exists(path):
                item.setText(item.text() + "  (not found: what was read from it is kept)")
            self.sources.addItem(item)
        for path, why in s.errors:
            item = QListWidgetItem(why)
            item.setToolTip(path)
            self.errors.addItem(item)
        self.errors_label.setVisible(bool(s.errors))
        self.errors.setVisible(bool(s.errors))
        self.update_button.setEnabled(self.service.indexing is None and bool(s.sources))

    def _set_running(self, name: str | None) -> None:
        running = name is not None
        self.progress.setVisible(running)
        self.pause_button.setVisible(running)
        self.cancel_button.setVisible(running)
        self.update_button.setEnabled(not running and self.current() is not None)
        self._show_paused(self.service.paused)

    @Slot(bool)
    def _show_paused(self, paused: bool) -> None:
        self.pause_button.setText("&Resume" if paused else "&Pause")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
