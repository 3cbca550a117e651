"""Bring a collection's index up to date with its folders and files.

First a scan (names and sizes only, fast) finds what is new, changed or gone; then each new or
changed file is read, cut into passages and stored in its own transaction. A file is "changed"
when its size or modification time differs and its SHA-256 does too (a file saved again unchanged
is not read twice). Stopping at any point (cancel, a crash, kill -9) keeps every file stored so
far; the next run starts where this one stopped.

Folders are walked without following links to folders (a link loop cannot trap it); links to
files are read. Hidden folders and the usual tool caches are passed over. A source folder that
is missing (an unplugged drive) or cannot be opened keeps what was indexed from it and is listed
with the files that could not be read; a file that vanished is dropped from the index. A file that
could not be opened is tried again at each update; one that was read but refused (a damaged PDF) only
when it changes. Nothing is ever written to the user's files.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.documents import chunks, readers
from engine.documents.library import FileState, Library, LibraryError, under

SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "build", "dist", "target"})


@dataclass
class Progress:
    """Where an update stands, for a progress bar."""

    files_total: int = 0  # files to read in this run (new or changed)
    files_done: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    passages: int = 0  # stored in this run
    errors: int = 0
    current: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def mb_per_minute(self) -> float:
        return self.bytes_done / 2**20 / max(self.elapsed_s, 1e-6) * 60

    @property
    def seconds_left(self) -> float | None:
        if not self.bytes_done or self.bytes_done >= self.bytes_total:
            return None
        return (self.bytes_total - self.bytes_done) * self.elapsed_s / self.bytes_done


@dataclass
class Report:
    """What an update did."""

    read: int = 0  # files read and stored
    unchanged: int = 0
    dropped: int = 0  # gone from the folders, so from the index
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, why), files and folders
    missing_sources: list[str] = field(default_factory=list)
    cancelled: bool = False


@dataclass(frozen=True)
class _Found:
    path: str
    size: int
    mtime_ns: int


class Controls:
    """Pause and cancel, from another thread."""

    def __init__(self):
        self.cancelled = threading.Event()
        self.running = threading.Event()
        self.running.set()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def cancel(self) -> None:
        self.cancelled.set()
        self.running.set()

    def wait_if_paused(self) -> bool:
        """Block while paused; False once cancelled."""
        while not self.running.wait(0.1):
            pass
        return not self.cancelled.is_set()


def update(
    library: Library,
    name: str,
    on_progress: Callable[[Progress], None] | None = None,
    controls: Controls | None = None,
) -> Report:
    """Index what is new or changed in collection name, drop what is gone; see the module's docstring."""
    controls = controls or Controls()
    collection = library.collection(name)
    report = Report()
    found, folder_errors = _scan(collection.sources, report)
    report.errors.extend(folder_errors)
    known = library.file_states(name)

    # Files gone from a folder that is still there (or from the collection) leave the index; a
    # missing source, or a folder that cannot be opened now, keeps what was indexed from it.
    unseen = report.missing_sources + [path for path, _ in folder_errors]
    for path in known.keys() - found.keys():
        if not any(under(path, root) for root in unseen):
            library.drop_file(name, path)
            report.dropped += 1
    # Listed with the files that could not be read, until the folder can be seen again (then dropped above).
    for path, why in folder_errors:
        if path not in known or known[path].error:  # never in place of a file source's own entry
            library.store_file(name, FileState(path, 0, 0, "", why, 0), [])

    todo = []
    for path, f in sorted(found.items()):
        old = known.get(path)
        could_not_open = old is not None and old.error and not old.sha256  # a permission, say: tried again
        if old is not None and (old.size, old.mtime_ns) == (f.size, f.mtime_ns) and not could_not_open:
            report.unchanged += 1
        else:
            todo.append((f, old))
    progress = Progress(files_total=len(todo), bytes_total=sum(f.size for f, _ in todo))
    if on_progress:
        on_progress(progress)
    for f, old in todo:
        if not controls.wait_if_paused():
            report.cancelled = True
            break
        progress.current = f.path
        try:
            stored = _index_file(library, name, f, old, report)
        except sqlite3.OperationalError as e:
            raise LibraryError(
                f"Indexing stopped: the index could not be written ({e}). "
                f"The {report.read} files read so far are kept; free some space and update again."
            ) from None
        progress.files_done += 1
        progress.bytes_done += f.size
        progress.passages += stored
        progress.errors = len(report.errors)
        if on_progress:
            on_progress(progress)
    progress.current = ""
    return report


def _index_file(library: Library, name: str, f: _Found, old: FileState | None, report: Report) -> int:
    """Read one file into the index; the number of passages stored."""
    path = Path(f.path)
    data_hash = ""  # stays empty when the file cannot even be opened: the next update tries it again
    try:
        data_hash = sha256_of(path)
        if old is not None and not old.error and old.sha256 == data_hash:
            library.touch_file(name, f.path, f.size, f.mtime_ns)  # saved again, same content
            report.unchanged += 1
            return 0
        document = readers.read(path, f.size)
        after = path.stat()
    except FileNotFoundError:
        if old is not None:
            library.drop_file(name, f.path)
            report.dropped += 1
        return 0
    except (readers.UnreadableFile, OSError) as e:
        why = str(e) if isinstance(e, readers.UnreadableFile) else f"{path.name}: cannot be read ({e.strerror or e})."
        library.store_file(name, FileState(f.path, f.size, f.mtime_ns, data_hash, why, 0), [])
        report.errors.append((f.path, why))
        return 0
    passages = chunks.passages(document)
    # Changed while being read: store what was read, with a size that never matches, so the next run reads it again.
    changed = (after.st_size, after.st_mtime_ns) != (f.size, f.mtime_ns)
    state = FileState(f.path, -1 if changed else f.size, f.mtime_ns, data_hash, "", len(passages))
    library.store_file(name, state, passages)
    report.read += 1
    return len(passages)


def _scan(sources: list[str], report: Report) -> tuple[dict[str, _Found], list[tuple[str, str]]]:
    found: dict[str, _Found] = {}
    errors: list[tuple[str, str]] = []

    def consider(path: str):
        if readers.format_of(Path(path)) is None and Path(path).suffix.lower() not in readers.NOT_READ:
            return  # not a document (an image, an archive): passed over
        try:
            st = os.stat(path)
        except OSError:
            return  # vanished or a dangling link: not there
        if os.path.isfile(path):
            found[path] = _Found(path, st.st_size, st.st_mtime_ns)

    for source in sources:
        if os.path.isfile(source):
            consider(source)
            continue
        if not os.path.isdir(source):
            report.missing_sources.append(source)
            errors.append((source, f"{source}: not found (a drive not connected?); what was indexed from it is kept."))
            continue

        def refused(e: OSError):
            errors.append((e.filename, f"{e.filename}: the folder cannot be opened ({e.strerror})."))

        for folder, subfolders, files in os.walk(source, onerror=refused, followlinks=False):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in SKIPPED_FOLDERS)
            for file in files:
                if not file.startswith("."):
                    consider(os.path.join(folder, file))
    return found, errors


def sha256_of(path: Path) -> str:
    """The file's SHA-256, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
