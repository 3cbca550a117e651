"""Collections kept up to date: real folders watched by watchdog (engine/documents/watch.py), and the
app's library thread catching up on start and updating a collection when its folder changes
(app/bridge/documents_service.py). Waits only bound a hang; nothing asserts a duration."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from app.bridge.documents_service import DocumentsService
from engine.documents.watch import FolderWatcher
from tests.signal_log import SignalLog

LICENSES = Path("/usr/share/common-licenses")


class Changes:
    def __init__(self):
        self.names: list[str] = []
        self.seen = threading.Event()

    def __call__(self, name: str) -> None:
        self.names.append(name)
        self.seen.set()

    def wait(self, timeout: float = 20.0) -> list[str]:
        assert self.seen.wait(timeout), "no change reported"
        self.seen.clear()
        return self.names


def test_a_burst_of_changes_is_reported_once_per_collection_after_it_settles(tmp_path):
    notes, other = tmp_path / "notes", tmp_path / "other"
    (notes / "sub").mkdir(parents=True)
    other.mkdir()
    changes = Changes()
    watcher = FolderWatcher(changes, debounce_s=0.5)
    try:
        watcher.watch({"notes": [str(notes)], "other": [str(other)]})
        for i in range(5):  # an editor saving, a folder copied in
            (notes / "sub" / f"page{i}.md").write_text(f"# Page {i}\n")
        assert changes.wait() == ["notes"]
        time.sleep(1.0)
        assert changes.names == ["notes"]  # once for the burst, nothing for the collection not touched
        (notes / "sub" / "page3.md").unlink()
        assert changes.wait() == ["notes", "notes"]
    finally:
        watcher.close()


def test_what_the_indexer_passes_over_is_not_a_change_and_a_file_source_is_watched_alone(tmp_path):
    folder, loose = tmp_path / "folder", tmp_path / "loose"
    (folder / ".git").mkdir(parents=True)
    (folder / "node_modules").mkdir()
    loose.mkdir()
    report = loose / "report.txt"
    report.write_text("first draft\n")
    changes = Changes()
    watcher = FolderWatcher(changes, debounce_s=0.3)
    try:
        watcher.watch({"folder": [str(folder)], "report": [str(report)]})
        (folder / ".git" / "index").write_bytes(b"\0" * 10)  # hidden: the indexer never reads it
        (folder / "node_modules" / "x.js").write_text("x")  # a tool cache
        (folder / "photo.png").write_bytes(b"\x89PNG")  # not a kind of file Specula reads
        (loose / "other.txt").write_text("beside the file, not part of the collection\n")
        report.read_text()  # reading is not changing (the indexer reads every file)
        time.sleep(1.5)
        assert changes.names == []
        report.write_text("second draft\n")
        assert changes.wait() == ["report"]
    finally:
        watcher.close()
    assert not any(t.name == "specula-documents-watch" and t.is_alive() for t in threading.enumerate())


def test_a_folder_that_cannot_be_watched_is_said_and_the_others_are_watched(tmp_path, monkeypatch):
    from engine.documents import watch

    shared, notes = tmp_path / "shared", tmp_path / "notes"
    shared.mkdir()
    notes.mkdir()
    schedule = watch.Observer.schedule

    def refusing(self, handler, path, *args, **kwargs):  # as the system answers once its watches run out
        if path == str(shared):
            raise OSError(28, "inotify watch limit reached")
        return schedule(self, handler, path, *args, **kwargs)

    monkeypatch.setattr(watch.Observer, "schedule", refusing)
    problems, changes = [], Changes()
    watcher = FolderWatcher(changes, debounce_s=0.3, on_problem=problems.append)
    try:
        watcher.watch({"shared": [str(shared)], "notes": [str(notes)]})
        (problem,) = problems
        assert f"Changes in {shared} (inotify watch limit reached) are not followed" in problem
        assert "Update index" in problem and str(notes) not in problem
        (notes / "todo.md").write_text("# Todo\n")
        assert changes.wait() == ["notes"]
    finally:
        watcher.close()

    def failing(self):
        raise OSError(24, "inotify instance limit reached")

    monkeypatch.setattr(watch.Observer, "start", failing)
    problems.clear()
    watcher = FolderWatcher(changes, on_problem=problems.append)
    watcher.watch({"notes": [str(notes)]})
    watcher.watch({"notes": [str(notes)]})  # after the next job: said once, not after every job
    watcher.close()  # nothing started, nothing to stop: no hang
    assert len(problems) == 1 and "your documents' folders (inotify instance limit reached)" in problems[0]


def test_the_library_catches_up_on_start_and_follows_its_folders_while_running(qtbot, tmp_path):
    folder = tmp_path / "licences"
    folder.mkdir()
    for name in ("Apache-2.0", "MPL-2.0"):
        shutil.copy(LICENSES / name, folder / name)
    root = tmp_path / "documents"
    first = DocumentsService(root)
    first_indexed = SignalLog(first.indexed)
    first.add_collection("licences")
    first.add_sources("licences", [str(folder)])
    first.update("licences")
    first_indexed.wait(qtbot, 0, lambda _name, report: report.read == 2)
    assert first.shutdown(5.0)

    shutil.copy(LICENSES / "GPL-3", folder / "GPL-3")  # while the app was closed
    service = DocumentsService(root)
    indexed = SignalLog(service.indexed)  # a watcher may split one change into two updates: waited for by what came
    try:
        service.keep_up_to_date()
        [(name, _report)] = indexed.wait(qtbot, 0, lambda _name, report: report.read == 1)
        assert name == "licences"  # GPL-3 read; the two known files were not read again

        since = indexed.mark()
        (folder / "notes.md").write_text("# Mirror\n\nThe aardvark mirror is at the north gate.\n")
        changed = indexed.wait(qtbot, since, lambda _name, report: report.read == 1)
        assert sum(report.read for _, report in changed) == 1
        since = indexed.mark()
        (folder / "MPL-2.0").unlink()
        deleted = indexed.wait(qtbot, since, lambda _name, report: report.dropped == 1)
        assert sum(report.read for _, report in deleted) == 0
        with qtbot.waitSignal(service.summaries_ready, timeout=30_000) as summaries:
            service.refresh()
        (summary,) = summaries.args[0]
        assert summary.files == 3  # Apache-2.0, GPL-3 and notes.md
        assert {name for name, _ in indexed.seen} == {"licences"}
    finally:
        assert service.shutdown(5.0)
    assert not any(t.name == "specula-documents-watch" and t.is_alive() for t in threading.enumerate())
