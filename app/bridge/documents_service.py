"""The document library's own thread: indexing and every change to the index run there, never on the GUI's.

One Python thread owns a Library (engine.documents) and takes jobs in order from a queue: add or
remove collections and sources, update a collection's index, read the collections' figures. What
happens comes back as signals, delivered on the GUI thread. An update reports its progress a few
times a second and can be paused, resumed and cancelled from the GUI thread (its Controls); a
cancelled update keeps every file it stored. Shutdown cancels the running job and waits a moment.

Kept up to date (keep_up_to_date, once the window is up): every collection is updated once, for
what changed while the app was closed, and then its folders are watched (engine.documents.watch);
a change, once settled, queues an update of that collection, only one waiting per collection.

The answer itself searches the index on the engine's thread, with a connection of its own (WAL:
an update going on does not block it).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.documents import indexer
from engine.documents.library import Library, passages_per_question, read_collections, read_definitions
from engine.documents.watch import FolderWatcher
from engine.errors import EngineError, user_message
from engine.paths import documents_dir

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.2


@dataclass(frozen=True)
class CollectionSummary:
    """A collection as the Documents window shows it."""

    name: str
    sources: list[str]
    files: int = 0
    passages: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, why) of files that could not be read


class DocumentsService(QObject):
    summaries_ready = Signal(object)  # [CollectionSummary]: after every change, and when asked
    progress = Signal(str, object)  # collection, indexer.Progress (a copy)
    indexed = Signal(str, object)  # collection, indexer.Report
    vector_progress = Signal(str, object)  # collection, vectors.VectorProgress (a copy): the embedding pass
    failed = Signal(str)  # a job could not be done: why, for the user
    # A downloaded file, once its header is read here: an embedding model (and whether it is now the one
    # used, there being none before), or any other model.
    embedding_model_downloaded = Signal(str, bool)
    other_model_downloaded = Signal(str)
    paused_changed = Signal(bool)

    def __init__(self, root: Path | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.root = Path(root) if root is not None else documents_dir()
        self.indexing: str | None = None  # the collection being updated
        self.controls = indexer.Controls()
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._watching = False
        self._watcher: FolderWatcher | None = None
        self._waiting: set[str] = set()  # collections with an update queued and not yet started
        self._waiting_lock = threading.Lock()
        self._claimed: set[str] = set()  # collection names given to dropped folders (their jobs may be queued)
        self._closed = False

    # -- reading (GUI thread, quick) --------------------------------------------------------------

    def names(self) -> list[str]:
        """The collections' names, from their small definitions file (not the index)."""
        return [c.name for c in read_collections(self.root)]

    def embedding_model(self) -> str:
        """The embedding model chosen for meaning search ("" for none), from the definitions file."""
        value = read_definitions(self.root).get("embedding_model")
        return value if isinstance(value, str) else ""

    def reranking_model(self) -> str:
        """The model chosen to reorder what a search found ("" for none), from the definitions file."""
        value = read_definitions(self.root).get("reranking_model")
        return value if isinstance(value, str) else ""

    # -- jobs ------------------------------------------------------------------------------------

    def refresh(self) -> None:
        self._submit(lambda library: None)

    def add_collection(self, name: str) -> None:
        self._submit(lambda library: library.add_collection(name))

    def add_sources(self, name: str, paths: list[str]) -> None:
        self._submit(lambda library: library.add_sources(name, paths))

    def add_folders(self, folders: list[str]) -> list[str]:
        """Folders dropped on a chat: for each, the collection that has it as a source already, or a new one
        named after it (a taken name gets " (2)"…), brought up to date. Their names, in order."""
        collections = read_collections(self.root)
        taken = {c.name for c in collections} | self._claimed
        names = []
        for folder in folders:
            folder = os.path.abspath(folder)
            holder = next((c.name for c in collections if folder in map(os.path.abspath, c.sources)), None)
            if holder is None:
                base = os.path.basename(os.path.normpath(folder)) or "Documents"
                holder = next(n for n in (base, *(f"{base} ({i})" for i in range(2, 10_000))) if n not in taken)
                taken.add(holder)
                self._claimed.add(holder)  # a second drop before this job runs must not take it too
                self.add_collection(holder)
                self.add_sources(holder, [folder])
            self.update(holder)
            names.append(holder)
        return names

    def remove_source(self, name: str, path: str) -> None:
        self._submit(lambda library: library.remove_source(name, path))

    def remove_collection(self, name: str) -> None:
        self._submit(lambda library: library.remove_collection(name))

    def set_embedding_model(self, path: str | None) -> None:
        """Search by meaning too with this GGUF embedding model (checked first), or not (None)."""

        def choose(library: Library) -> None:
            if path is not None:
                from engine.documents.embeddings import check

                check(path)  # not an embedding model: failed says which kind of file it is
            library.set_embedding_model(path)

        self._submit(choose)

    def passages_per_question(self) -> int:
        """At most how many passages go before a question (from the definitions file, not the index)."""
        return passages_per_question(read_definitions(self.root))

    def set_passages_per_question(self, n: int) -> None:
        self._submit(lambda library: library.set_passages_per_question(n))

    def set_reranking_model(self, path: str | None) -> None:
        """Reorder the passages a search found with this text-generation GGUF (its header checked
        first), or not (None). Loaded by the chat's engine thread at the next grounded answer."""

        def choose(library: Library) -> None:
            if path is not None:
                from engine.documents.rerank import check

                check(path)  # an embedding model or a reranker: failed says what it is
            library.set_reranking_model(path)

        self._submit(choose)

    def consider_download(self, path: str) -> None:
        """A model file just downloaded: an embedding model becomes the one used for meaning search
        when none is chosen (embedding_model_downloaded); any other file goes back to the caller
        (other_model_downloaded). The header is read here, off the GUI thread."""

        def consider(library: Library) -> None:
            from engine.documents.embeddings import check

            try:
                check(path)
            except EngineError:
                self.other_model_downloaded.emit(path)
                return
            adopt = library.embedding_model() is None
            if adopt:
                library.set_embedding_model(path)
            self.embedding_model_downloaded.emit(path, adopt)

        self._submit(consider)

    def update(self, name: str) -> None:
        """Bring the collection's index up to date (progress, then indexed)."""
        self._submit(lambda library: self._update(library, name))

    def keep_up_to_date(self) -> None:
        """Update every collection for what changed while the app was closed, then watch their folders
        (and those of collections added later). No collection: no thread until one is added."""
        self._watching = True
        if self.names():
            self._submit(lambda library: [self._changed(c.name) for c in library.collections()])

    def pause(self) -> None:
        self.controls.pause()
        self.paused_changed.emit(True)

    def resume(self) -> None:
        self.controls.resume()
        self.paused_changed.emit(False)

    @property
    def paused(self) -> bool:
        return not self.controls.running.is_set()

    def cancel(self) -> None:
        """Stop the update running now (what it stored stays); queued jobs still run."""
        self.controls.cancel()
        self.paused_changed.emit(False)

    def shutdown(self, wait_s: float = 5.0) -> bool:
        """Cancel what runs, skip what waits, and wait for the thread (wait_s at most); True if it ended."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.close()
        thread = self._thread
        if thread is None:
            return True
        while not self._jobs.empty():
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self.controls.cancel()
        self._jobs.put(None)
        thread.join(wait_s)
        return not thread.is_alive()

    # -- the thread -------------------------------------------------------------------------------

    def _submit(self, job: Callable[[Library], object]) -> None:
        if self._closed:
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="specula-documents", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        library = None
        try:
            library = Library(self.root)
            if library.rebuilt:
                self.failed.emit(library.rebuilt)
            while (job := self._jobs.get()) is not None:
                try:
                    job(library)
                except Exception as e:  # noqa: BLE001 - a job's failure is said, the thread goes on
                    log.exception("documents job failed")
                    self.failed.emit(user_message(e))
                self.summaries_ready.emit(self._summaries(library))
                self._watch(library)
        except Exception as e:  # noqa: BLE001 - the library cannot be opened at all
            log.exception("the document library cannot be opened")
            self.failed.emit(f"The document library cannot be opened: {user_message(e)}")
        finally:
            if library is not None:
                library.close()

    def _changed(self, name: str) -> None:
        """The collection changed (the watcher's thread, or catching up): one update queued for it."""
        with self._waiting_lock:
            if name in self._waiting:
                return
            self._waiting.add(name)
        self.update(name)

    def _watch(self, library: Library) -> None:
        """Watch the collections' sources as they are now (after any job may have changed them)."""
        if not self._watching or self._closed:
            return
        sources = {c.name: c.sources for c in library.collections()}
        if self._watcher is None and not sources:
            return  # no collection: no watcher thread
        if self._watcher is None:
            self._watcher = FolderWatcher(self._changed, on_problem=self.failed.emit)
        self._watcher.watch(sources)

    def _update(self, library: Library, name: str) -> None:
        with self._waiting_lock:
            self._waiting.discard(name)  # a change from now on queues another update
        self.controls = indexer.Controls()
        self.indexing = name
        last = 0.0

        def on_progress(p: indexer.Progress) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S or p.files_done == p.files_total:
                last = now
                self.progress.emit(name, replace(p))

        try:
            report = indexer.update(library, name, on_progress, self.controls)
            if not report.cancelled and library.embedding_model() is not None:
                self._embed(library, name)
        finally:
            self.indexing = None
        self.indexed.emit(name, report)

    def _embed(self, library: Library, name: str) -> None:
        """The vectors the collection's new passages lack, for hybrid search (keyword search works meanwhile)."""
        from engine.documents import vectors
        from engine.documents.embeddings import Embedder, model_key

        try:
            if not vectors.missing(library, name, model_key(library.embedding_model())):
                return  # nothing new to embed: the model is not loaded
        except OSError:
            pass  # the model file is gone: loading it says so
        try:
            embedder = Embedder(library.embedding_model())
        except EngineError as e:
            self.failed.emit(f"Keyword search only: the embedding model cannot be used: {user_message(e)}")
            return
        last = 0.0

        def on_progress(p) -> None:
            nonlocal last
            if time.monotonic() - last >= PROGRESS_EVERY_S or p.done == p.total:
                last = time.monotonic()
                self.vector_progress.emit(name, replace(p))

        try:
            vectors.update(library, name, embedder, on_progress, self.controls)
        finally:
            embedder.close()

    @staticmethod
    def _summaries(library: Library) -> list[CollectionSummary]:
        out = []
        for c in library.collections():
            files, passages, _ = library.counts(c.name)
            out.append(CollectionSummary(c.name, c.sources, files, passages, library.errors(c.name)))
        return out
