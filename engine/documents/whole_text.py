"""The whole text of a chat's collections, passage by passage as a prompt gives passages: a draft
source for quotes of passages that no search found (engine/decoding/collection_drafts.py keeps it
as a suffix index in the model's tokens).

Read through a read-only connection of its own, opened on whichever thread reads (the engine reads
it on a thread of its own, while the library may be indexing on another).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from engine.documents.reflow import for_prompt

log = logging.getLogger(__name__)

_OF_COLLECTIONS = "FROM passages JOIN files ON files.id = passages.file_id WHERE files.collection IN ({})"


@dataclass(frozen=True)
class WholeText:
    index_file: Path  # the library's index (Library.index_file)
    collections: tuple[str, ...]

    def version(self) -> tuple | None:
        """What the text is now: its passages' count and newest id, its files' count and the sum of
        their passages' indexing times (a file indexed again may reuse the ids its old passages had;
        its new time changes the sum). None when the index cannot be read."""
        marks = ",".join("?" * len(self.collections))
        try:
            with closing(self._connect()) as db:
                row = db.execute(
                    "SELECT COUNT(*), COALESCE(MAX(passages.id), 0), COUNT(DISTINCT files.id),"
                    f" TOTAL(files.indexed_at) {_OF_COLLECTIONS.format(marks)}",
                    self.collections,
                ).fetchone()
        except sqlite3.Error as e:
            log.warning("collections not read for drafting: %s", e)
            return None
        return tuple(row)

    def texts(self) -> Iterator[str]:
        """Each passage's text as grounding puts it in a prompt (reflowed), in the order indexed."""
        marks = ",".join("?" * len(self.collections))
        with closing(self._connect()) as db:
            query = f"SELECT files.path, passages.text {_OF_COLLECTIONS.format(marks)} ORDER BY passages.id"
            for path, text in db.execute(query, self.collections):
                yield for_prompt(path, text)

    def cache_folder(self) -> Path:
        """Where the engine keeps this text's drafting index between runs: beside the library's own index."""
        return self.index_file.parent / "drafting"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.index_file.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
