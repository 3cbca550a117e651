"""Collections kept up to date while the app runs: their folders watched, a change reported once
it has settled.

watchdog (inotify, FSEvents, ReadDirectoryChangesW) watches each source folder with its
subfolders, and each source file through its folder; it reports what the system reports: a file
created, written, deleted or renamed. A burst of events (an editor saving, a folder copied in) is
reported once per collection, DEBOUNCE_S after the last of it, and the caller updates that
collection's index incrementally (only what changed is read). Events the indexer would pass over
are ignored: hidden files and folders, tool caches, files of kinds Specula does not read, and
files merely opened or read (the indexer reading a file must not report it as a change).

Why watchdog rather than Qt's QFileSystemWatcher: the engine has no Qt, and Qt's watcher watches
one folder level at a time, so every subfolder of a large tree would have to be listed (on the GUI
thread or handed across) and kept up to date by hand; watchdog watches a tree recursively.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from engine.documents.indexer import SKIPPED_FOLDERS
from engine.documents.readers import NOT_READ, SUFFIXES

log = logging.getLogger(__name__)

DEBOUNCE_S = 2.0
CHANGES = frozenset({"created", "modified", "deleted", "moved", "closed"})  # closed: after writing


class FolderWatcher:
    """Calls on_change(collection) from a thread of its own when a collection's files change.

    watch() says what to watch and may be called again (the sources changed); close() stops it all.
    A source that is missing (an unplugged drive) is not watched; the next watch() tries again.
    """

    def __init__(
        self,
        on_change: Callable[[str], None],
        debounce_s: float = DEBOUNCE_S,
        on_problem: Callable[[str], None] | None = None,
    ):
        """on_problem(why): a folder cannot be watched (unreadable, the system's limit of watches reached),
        for the user: its changes are then picked up only when the collection is updated by hand."""
        self.on_change = on_change
        self.on_problem = on_problem or (lambda why: None)
        self.debounce_s = debounce_s
        self._observer = None
        self._sources: dict[str, list[str]] = {}
        self._due: dict[str, float] = {}  # collection -> when to report it
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._start_failed = False
        self._reporter = threading.Thread(target=self._report, name="specula-documents-watch", daemon=True)
        self._reporter.start()

    def watch(self, sources: dict[str, list[str]]) -> None:
        """Watch these collections' sources (name -> folders and files), instead of what was watched."""
        sources = {name: [str(Path(s)) for s in paths] for name, paths in sources.items()}
        if sources == self._sources and (self._observer is not None or self._start_failed):
            return  # already watched, or said once that it cannot be
        self._stop_observer()
        self._sources = sources
        observer = Observer()
        handler = _Handler(self)
        watched: set[tuple[str, bool]] = set()
        unwatched: list[str] = []
        for paths in sources.values():
            for source in paths:
                where = (source, True) if os.path.isdir(source) else (os.path.dirname(source), False)
                if where in watched or not os.path.isdir(where[0]):
                    continue
                try:
                    observer.schedule(handler, where[0], recursive=where[1])
                    watched.add(where)
                except OSError as e:  # unreadable, or the system's limit of watches reached
                    log.warning("cannot watch %s for changes: %s", where[0], e)
                    unwatched.append(f"{where[0]} ({e.strerror or e})")
        observer.daemon = True
        try:
            observer.start()  # inotify's watches are added here: the limit is often reached here
        except OSError as e:
            log.warning("cannot watch the documents' folders for changes: %s", e)
            unwatched = [f"your documents' folders ({e.strerror or e})"]
            observer = None
        self._observer, self._start_failed = observer, observer is None
        if unwatched:
            self.on_problem(
                f"Changes in {', '.join(unwatched)} are not followed while Specula runs; use Update index in "
                "File › Documents… after changing files there. On Linux the limit of watched folders is "
                "raised with the fs.inotify.max_user_watches setting."
            )

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._stop_observer()
        self._reporter.join(5)

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None

    def changed(self, path: str, folder: bool = False) -> None:
        """A file or folder under the watched sources changed (from watchdog's thread)."""
        names = [name for name, paths in self._sources.items() if any(_relevant(path, s, folder) for s in paths)]
        with self._lock:
            for name in names:
                self._due[name] = time.monotonic() + self.debounce_s
        if names:
            self._wake.set()

    def _report(self) -> None:
        while not self._closed:
            with self._lock:
                now = time.monotonic()
                ready = [name for name, due in self._due.items() if due <= now]
                for name in ready:
                    del self._due[name]
                wait = min((due - now for due in self._due.values()), default=None)
            for name in ready:
                try:
                    self.on_change(name)
                except Exception:  # noqa: BLE001 - the watcher outlives a failing callback
                    log.exception("reporting a change of %s failed", name)
            self._wake.wait(wait)
            self._wake.clear()


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: FolderWatcher):
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in CHANGES:
            return
        if event.is_directory and event.event_type in ("modified", "closed"):
            return  # a folder's entries changed: each entry's own event says which, and whether it counts
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path:
                self.watcher.changed(os.fsdecode(path), event.is_directory)


def _relevant(path: str, source: str, folder: bool) -> bool:
    """Is path the source, or under it where the indexer looks (not hidden, not a tool cache), and
    a folder or of a kind it reads (a name without a type may be text)?"""
    if path != source and not path.startswith(source.rstrip(os.sep) + os.sep):
        return False
    inside = Path(path).relative_to(source).parts
    if any(part.startswith(".") or part in SKIPPED_FOLDERS for part in inside):
        return False
    suffix = Path(path).suffix.lower()
    return folder or not suffix or suffix in SUFFIXES or suffix in NOT_READ or suffix[1:].isdigit()
