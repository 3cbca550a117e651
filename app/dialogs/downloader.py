"""The downloader dialog: find GGUF models on the Hugging Face hub, check them, download them.

Every hub call and the download itself run on BackgroundTasks' pool threads; this dialog only
starts them and shows what comes back, so an offline or slow hub never freezes the app. One
download at a time; a paused or interrupted one (also from an earlier session) can be resumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.bridge.hub_tasks import BackgroundTasks
from app.core import recent_searches
from app.ui.flow_layout import FlowLayout
from app.ui.tables import add_row, human_size, make_table, selected_row
from engine.gguf.header import read_header
from engine.gguf.pairing import VocabInfo, incompatibility
from engine.models.download import Download, DownloadRecord, Outcome, Progress, bytes_present, pending_downloads
from engine.models.hub import (
    Fit,
    Hub,
    MachineMemory,
    QuantGroup,
    RepoDetails,
    RepoSummary,
    estimate_fit,
    machine_memory,
)
from engine.models.library import ModelEntry, ModelLibrary
from engine.paths import models_dir

SORT_CHOICES = [("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent")]
FIT_COLOURS = {Fit.FITS: "#1e9e5a", Fit.TIGHT: "#c98a00", Fit.WONT_FIT: "#d03b3b", Fit.UNKNOWN: "#808080"}
DEFAULT_CONTEXT = 4096
CLOSE_WAIT_MS = 3000  # closing waits this long for background tasks (a paused download ends at once)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _RepoView:
    """What the files pane shows for one repository, computed on a pool thread."""

    details: RepoDetails
    memory: MachineMemory
    draft_verdict: str | None  # None: no target, or no header to check


POPULAR_COUNT = 30
EMBEDDING_QUERY = (
    "embed"  # embedding models say so in their names (nomic-embed-text, mxbai-embed-large); others: the search box
)


class DownloaderDialog(QDialog):
    model_downloaded = Signal(Path)

    def __init__(
        self,
        parent: QWidget | None = None,
        library: ModelLibrary | None = None,
        target: ModelEntry | None = None,
        hub: Hub | None = None,
    ):
        super().__init__(parent)
        self.setWindowTitle("Download models")
        self.resize(960, 680)
        self.library, self.target = library, target
        self.hub = hub or Hub()
        self.dest_dir = library.models_dir if library else models_dir()
        self.tasks = BackgroundTasks(self)
        self._repos: list[RepoSummary] = []
        self._view: _RepoView | None = None
        self._download: Download | None = None
        self._downloading = False
        self._target_vocab: VocabInfo | None = None
        # Numbers of the newest search and repository requests: older answers are dropped.
        self._search_request = self._repo_request = 0
        self._build()
        self._show_recent(recent_searches.load())
        self._show_pending()
        self.show_popular()

    # -- layout ---------------------------------------------------------------------------------

    def _build(self) -> None:
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.setStyleSheet(
            "QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e8b4b0;"
            " border-radius: 4px; padding: 8px; }"
        )
        self.banner.hide()

        self.query = QLineEdit()
        self.query.setPlaceholderText("Search GGUF models, e.g. qwen2.5 coder, llama 3.2, gemma")
        self.query.setToolTip("Words in the repository name; only repositories with GGUF files are listed.")
        self.query.returnPressed.connect(self.search)
        self.sort = QComboBox()
        for label, key in SORT_CHOICES:
            self.sort.addItem(label, key)
        self.sort.setToolTip("Order of the results, as the hub sorts them.")
        self.sort.currentIndexChanged.connect(lambda _: self.query.text().strip() and self.search())
        self.search_button = QPushButton("Search")
        self.search_button.setToolTip("Search the Hugging Face hub (needs an internet connection).")
        self.search_button.clicked.connect(self.search)
        search_row = QHBoxLayout()
        search_row.addWidget(self.query, 1)
        search_row.addWidget(self.sort)
        search_row.addWidget(self.search_button)
        self.embedding_button = QPushButton("Embedding models")
        self.embedding_button.setToolTip(
            "Models that turn text into vectors, so that File → Documents finds passages by meaning, not only by words."
        )
        self.embedding_button.clicked.connect(self.suggest_embedding_models)
        search_row.addWidget(self.embedding_button)
        if self.target is not None:
            self.drafts_button = QPushButton(f"Drafts for {_short(self.target.name)}")
            self.drafts_button.setToolTip(
                f"Smaller models of the same family as {self.target.name}, sized for speculative decoding."
            )
            self.drafts_button.clicked.connect(self.suggest_drafts)
            search_row.addWidget(self.drafts_button)

        # Earlier searches, a click away until this dialog's first search; they need no hub, so
        # they are there offline too.
        self.recent_box = QWidget()
        recent_layout = QHBoxLayout(self.recent_box)
        recent_layout.setContentsMargins(0, 0, 0, 0)
        recent_layout.addWidget(QLabel("Recent:"), 0, Qt.AlignmentFlag.AlignTop)
        self.recent_flow = FlowLayout(h_spacing=2, v_spacing=2)
        recent_layout.addLayout(self.recent_flow, 1)
        self.recent_buttons: list[QToolButton] = []
        self.clear_recent_button = QToolButton()
        self.clear_recent_button.setText("Clear")
        self.clear_recent_button.setAutoRaise(True)
        self.clear_recent_button.setToolTip("Forget these recent searches.")
        self.clear_recent_button.clicked.connect(self.clear_recent)
        recent_layout.addWidget(self.clear_recent_button, 0, Qt.AlignmentFlag.AlignTop)

        self.results_title = QLabel("Search the hub to see repositories.")
        self.results = make_table(["Repository", "Downloads", "Likes", "Licence", "Updated"])
        self.results.setToolTip("Select a repository to see its model files.")
        self.results.itemSelectionChanged.connect(self._repo_selected)

        self.files_title = QLabel("Files")
        self.context = QSpinBox()
        self.context.setRange(512, 262_144)
        self.context.setSingleStep(1024)
        self.context.setValue(
            min(DEFAULT_CONTEXT, self.target.context_length or DEFAULT_CONTEXT) if self.target else DEFAULT_CONTEXT
        )
        self.context.setSuffix(" tokens")
        self.context.setToolTip("Context length you plan to use: the KV cache grows with it, and counts in the fit.")
        self.context.valueChanged.connect(self._show_files)
        self.memory_label = QLabel()
        files_head = QHBoxLayout()
        files_head.addWidget(self.files_title, 1)
        files_head.addWidget(self.memory_label)
        files_head.addWidget(QLabel("Context:"))
        files_head.addWidget(self.context)
        self.files = make_table(["Quantization", "File", "Size", "Fit"], stretch=1)
        self.files.setToolTip("One row per model: split files (-00001-of-0000N) are one model.")
        self.files.itemSelectionChanged.connect(self._update_buttons)
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        self.verdict.hide()

        files_box = QWidget()
        files_layout = QVBoxLayout(files_box)
        files_layout.setContentsMargins(0, 0, 0, 0)
        files_layout.addLayout(files_head)
        files_layout.addWidget(self.files, 1)
        files_layout.addWidget(self.verdict)
        results_box = QWidget()
        results_layout = QVBoxLayout(results_box)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.addWidget(self.results_title)
        results_layout.addWidget(self.results, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(results_box)
        splitter.addWidget(files_box)
        splitter.setSizes([300, 260])

        self.download_button = QPushButton("Download")
        self.download_button.setToolTip(f"Download the selected model into {self.dest_dir}.")
        self.download_button.clicked.connect(self.start_download)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("%p%")
        self.progress.setToolTip("Download progress")
        self.status = QLabel("")
        self.status.setMinimumWidth(300)
        self.pause_button = QPushButton("Pause")
        self.pause_button.setToolTip(
            "Pause the download; the partial file is kept and resumes later, even after a restart."
        )
        self.pause_button.clicked.connect(self.pause_or_resume)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download and delete the partial file.")
        self.cancel_button.clicked.connect(self.cancel_download)
        download_row = QHBoxLayout()
        download_row.addWidget(self.download_button)
        download_row.addWidget(self.progress, 1)
        download_row.addWidget(self.pause_button)
        download_row.addWidget(self.cancel_button)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        where = QLabel(f"Downloads go to {self.dest_dir}")
        where.setStyleSheet("color: palette(mid);")
        bottom = QHBoxLayout()
        bottom.addWidget(where, 1)
        bottom.addWidget(buttons)

        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addLayout(search_row)
        layout.addWidget(self.recent_box)
        layout.addWidget(splitter, 1)
        layout.addLayout(download_row)
        layout.addWidget(self.status)
        layout.addLayout(bottom)
        self._update_buttons()

    # -- search ---------------------------------------------------------------------------------

    def search(self) -> None:
        text = self.query.text().strip()
        sort = self.sort.currentData()
        recent_searches.remember(text)
        self.recent_box.hide()  # the list below answers a search now; the recent ones were a place to start
        self._ask(f"Searching for “{text}”…", lambda _: self.hub.search(text, sort), self._show_results)

    def show_popular(self) -> None:
        """Before the first search: the most downloaded GGUF repositories, a place to start."""
        self._ask(
            "Looking up popular GGUF models…",
            lambda _: self.hub.search("", "downloads", limit=POPULAR_COUNT),
            lambda repos: self._show_results(repos, f"Most downloaded GGUF repositories ({len(repos)})"),
        )

    def run_recent(self, query: str) -> None:
        self.query.setText(query)
        self.search()

    def clear_recent(self) -> None:
        recent_searches.clear()
        self._show_recent([])

    def _show_recent(self, searches: list[str]) -> None:
        """One flat button per recent search, newest first; the row hides when there are none."""
        for button in self.recent_buttons:
            self.recent_flow.removeWidget(button)
            button.deleteLater()
        self.recent_buttons = []
        for query in searches:
            button = QToolButton()
            button.setText(_short(query, 24))
            button.setAutoRaise(True)
            button.setToolTip(f"Search again for “{query}”")
            button.clicked.connect(lambda _=False, query=query: self.run_recent(query))
            self.recent_flow.addWidget(button)
            self.recent_buttons.append(button)
        self.recent_box.setVisible(bool(searches))

    def suggest_drafts(self) -> None:
        target = self.target
        self._ask(
            f"Looking for drafts for {target.name}…",
            lambda _: [s.repo for s in self.hub.suggest_drafts(target)],
            lambda repos: self._show_results(repos, f"Drafts for {target.name}: smaller models of its family"),
        )

    def suggest_embedding_models(self) -> None:
        """GGUF embedding models, most downloaded first (nomic-embed-text-v1.5 leads them)."""
        self.recent_box.hide()
        self._ask(
            "Looking for embedding models…",
            lambda _: self.hub.search(EMBEDDING_QUERY, "downloads"),
            lambda repos: self._show_results(repos, "Embedding models, for searching your documents by meaning"),
        )

    def _ask(self, doing: str, fn, on_success) -> None:
        """Run fn on the pool; only the newest request's answer is shown."""
        self._search_request += 1
        request = self._search_request
        self.results_title.setText(doing)
        self.results.setRowCount(0)  # the old list is not the answer to this request
        self._set_files(None)

        def succeeded(value):
            if request == self._search_request:
                self.banner.hide()
                on_success(value)

        def failed(message):
            if request == self._search_request:
                self.results_title.setText("")  # the banner above says why
                self._show_error(message)

        self.tasks.start(fn, succeeded, failed)

    def _show_results(self, repos: list[RepoSummary], title: str | None = None) -> None:
        self._repos = repos
        self._repo_request += 1  # a repository still loading belongs to the old list
        self.results_title.setText(title or (f"{len(repos)} repositories" if repos else "No GGUF repositories found."))
        self.results.setRowCount(0)
        for repo in repos:
            updated = repo.last_modified.strftime("%Y-%m-%d") if repo.last_modified else ""
            add_row(
                self.results,
                [repo.repo_id, f"{repo.downloads:,}", f"{repo.likes:,}", repo.license or "?", updated],
                numeric={1, 2},
            )
        self._set_files(None)

    # -- one repository's files ------------------------------------------------------------------

    def _repo_selected(self) -> None:
        row = selected_row(self.results)
        if row is None:
            return
        repo_id = self._repos[row].repo_id
        self._set_files(None)
        self.files_title.setText(f"Files in {repo_id}: loading…")
        self._repo_request += 1
        request = self._repo_request

        def load(_report) -> _RepoView:
            details = self.hub.repo_details(repo_id)
            return _RepoView(details, machine_memory(), self._draft_verdict(details))

        def loaded(view: _RepoView) -> None:
            if request == self._repo_request:
                self.banner.hide()
                self._set_files(view)

        def failed(message: str) -> None:
            if request == self._repo_request:
                self.files_title.setText(f"Files in {repo_id}: not available")
                self._show_error(message)

        self.tasks.start(load, loaded, failed)

    def _draft_verdict(self, details: RepoDetails) -> str | None:
        """On a pool thread: the target's rules applied to the header fetched with the file list."""
        if self.target is None or details.header is None:
            return None
        if self._target_vocab is None:
            self._target_vocab = VocabInfo.from_header(read_header(self.target.path))
        return incompatibility(self._target_vocab, VocabInfo.from_header(details.header)) or ""

    def _set_files(self, view: _RepoView | None) -> None:
        self._view = view
        self.files_title.setText(f"Files in {view.details.files.repo_id}" if view else "Files")
        self._show_files()
        self._show_verdict()

    def _show_files(self) -> None:
        self.files.setRowCount(0)
        view = self._view
        if view is None:
            self.memory_label.setText("")
            self._update_buttons()
            return
        self.memory_label.setText(_memory_text(view.memory))
        header = view.details.header
        kv = header.kv_bytes_per_token() if header else None
        for group in view.details.files.groups:
            fit = estimate_fit(group.size, self.context.value(), kv, view.memory)
            row = add_row(self.files, [group.quantization, group.label, human_size(group.size), fit.value], numeric={2})
            item = self.files.item(row, 3)
            item.setForeground(QColor(FIT_COLOURS[fit]))
            item.setToolTip(_fit_tooltip(group, self.context.value(), kv, view.memory))
        if not view.details.files.groups:
            self.files_title.setText(f"Files in {view.details.files.repo_id}: no GGUF model files")
        self._update_buttons()

    def _show_verdict(self) -> None:
        view = self._view
        if self.target is None or view is None:
            self.verdict.hide()
            return
        name = _short(self.target.name)
        if view.draft_verdict is None:
            problem = view.details.header_problem or "no header"
            text, colour = f"Could not check the vocabulary against {name}: {problem}", FIT_COLOURS[Fit.UNKNOWN]
        elif view.draft_verdict == "":
            text, colour = (
                f"✓ Can draft for {name}: same vocabulary (checked from the file's header).",
                FIT_COLOURS[Fit.FITS],
            )
        else:
            text, colour = f"✗ Cannot draft for {name}: {view.draft_verdict}.", FIT_COLOURS[Fit.WONT_FIT]
        self.verdict.setText(text)
        self.verdict.setStyleSheet(f"color: {colour};")
        self.verdict.show()

    # -- downloading ----------------------------------------------------------------------------

    def selected_group(self) -> QuantGroup | None:
        row = selected_row(self.files)
        return self._view.details.files.groups[row] if self._view and row is not None else None

    def start_download(self) -> None:
        group, view = self.selected_group(), self._view
        if group is None or view is None or self._downloading:
            return
        files = view.details.files
        self._download = Download(DownloadRecord(files.repo_id, files.revision, group.files), self.dest_dir, self.hub)
        self._run_download()

    def pause_or_resume(self) -> None:
        if self._download is None:
            return
        if self._downloading:
            self._download.pause()
            self.status.setText("Pausing…")
        else:
            self._run_download()

    def cancel_download(self) -> None:
        if self._download is None:
            return
        if self._downloading:
            self._download.cancel()  # the pool thread deletes the partial file when it stops
            self.status.setText("Cancelling…")
        else:
            self._download.discard()
            self._download = None
            self.progress.setValue(0)
            self.status.setText("Cancelled; the partial file was deleted.")
            self._update_buttons()

    def _run_download(self) -> None:
        download = self._download
        self._downloading = True
        self.banner.hide()
        self.status.setText(f"Starting {download.record.name}…")
        self._update_buttons()
        self.tasks.start(download.run, self._download_finished, self._download_failed, self._download_progress)

    def _download_progress(self, progress: Progress) -> None:
        self.progress.setValue(round(progress.fraction * 1000))
        self.status.setText(_progress_text(self._download.record.name, progress))

    def _download_finished(self, outcome: Outcome) -> None:
        self._downloading = False
        download = self._download
        if outcome is Outcome.DONE:
            self.progress.setValue(1000)
            self.status.setText(f"Downloaded and verified {download.record.name}.")
            self._download = None
            self.model_downloaded.emit(download.path)
        elif outcome is Outcome.PAUSED:
            done = bytes_present(download.record, self.dest_dir)
            self.status.setText(
                f"Paused at {human_size(done)} of {human_size(download.record.size)}; the partial file is kept. Resume any time."
            )
        else:
            self.progress.setValue(0)
            self.status.setText("Cancelled; the partial file was deleted.")
            self._download = None
        self._update_buttons()

    def _download_failed(self, message: str) -> None:
        self._downloading = False
        self._show_error(message)
        download = self._download
        if download is not None and bytes_present(download.record, self.dest_dir) == 0:
            download.discard()  # nothing to resume: forget it
            self._download = None
            self.progress.setValue(0)
        self.status.setText("Download stopped." if self._download is None else "Download stopped; resume to continue.")
        self._update_buttons()

    def _show_pending(self) -> None:
        """A download left unfinished (paused, failed, or the app closed) can be resumed."""
        pending = pending_downloads(self.dest_dir)
        if not pending:
            return
        record = pending[0]
        self._download = Download(record, self.dest_dir, self.hub)
        done = bytes_present(record, self.dest_dir)
        self.progress.setValue(round(done / record.size * 1000) if record.size else 0)
        more = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
        self.status.setText(
            f"Unfinished download: {record.name} from {record.repo_id}, {human_size(done)} of {human_size(record.size)}{more}. "
            "Resume or cancel it."
        )
        self._update_buttons()

    # -- state ----------------------------------------------------------------------------------

    def _update_buttons(self) -> None:
        has_download = self._download is not None
        self.download_button.setEnabled(self.selected_group() is not None and not self._downloading)
        self.pause_button.setEnabled(has_download)
        self.pause_button.setText("Pause" if self._downloading or not has_download else "Resume")
        self.cancel_button.setEnabled(has_download)

    def _show_error(self, message: str) -> None:
        self.banner.setText(message)
        self.banner.show()

    def done(self, result: int) -> None:
        self.stop_tasks()
        super().done(result)

    def stop_tasks(self) -> None:
        """Pause (never lose) a running download and wait, bounded, for the pool threads.

        A pause interrupts even a transfer stalled in a read, so they end at once; a search still
        waiting on the hub ends within the HTTP timeout, harmlessly (its result goes nowhere).
        """
        if self._download is not None and self._downloading:
            self._download.pause()
        if not self.tasks.wait(CLOSE_WAIT_MS):
            log.warning("the downloader's background tasks did not end within %d ms of closing", CLOSE_WAIT_MS)


# -- small helpers ------------------------------------------------------------------------------


def _short(name: str, limit: int = 32) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _progress_text(name: str, p: Progress) -> str:
    if p.phase == "checking":
        return f"Checking the partial file of {name}… {human_size(p.done)}"
    parts = [f"{name}: {human_size(p.done)} of {human_size(p.total)}"]
    if p.speed > 0:
        parts.append(f"{p.speed / 1e6:.1f} MB/s")
    if p.eta_s is not None:
        parts.append(f"{_duration(p.eta_s)} left")
    return " · ".join(parts)


def _memory_text(memory: MachineMemory) -> str:
    parts = []
    if memory.free_ram is not None:
        parts.append(f"{human_size(memory.free_ram)} RAM free")
    if memory.free_vram is not None:
        parts.append(f"{human_size(memory.free_vram)} VRAM free")
    return ", ".join(parts) or "free memory unknown"


def _fit_tooltip(group: QuantGroup, n_ctx: int, kv: int | None, memory: MachineMemory) -> str:
    kv_text = (
        f"{human_size(n_ctx * kv)} KV cache for {n_ctx:,} tokens"
        if kv
        else f"a KV cache for {n_ctx:,} tokens (estimated)"
    )
    return (
        f"{human_size(group.size)} of weights plus {kv_text} and runtime overhead, "
        f"against {_memory_text(memory)}.\nFits: under 3/4 of free memory. Tight: under all of it."
    )
