"""A folder of test documents indexed as a collection of its own name, with the reason each file that
could not be read gave (by file name): what the reader tests of each format check."""

from __future__ import annotations

from pathlib import Path

from engine.documents import indexer
from engine.documents.library import Library


def indexed_folder(tmp_path: Path, folder: Path) -> tuple[Library, indexer.Report, dict[str, str]]:
    library = Library(tmp_path / "lib")
    library.add_collection(folder.name)
    library.add_sources(folder.name, [folder])
    report = indexer.update(library, folder.name)
    return library, report, {Path(path).name: reason for path, reason in report.errors}
