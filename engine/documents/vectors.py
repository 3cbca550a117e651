"""Passage vectors in the index: filled in by a pass of their own, searched exactly with numpy.

Storage: a table in the same SQLite index (library.py), one row per passage and embedding model,
holding the vectors of the passage's windows as one float16 blob (unit rows, one after another).

Windows: a passage (about 1,000 characters, ~250 tokens) is embedded as overlapping windows of
about WINDOW_CHARS characters, each with the passage's heading, and scores by its best window.
Small embedding models are trained on short texts (all-MiniLM-L6-v2 on 128 tokens) and one vector
of a whole passage blurs its several points: on the licence questions of engine.bench_docs,
vectors' recall@5 went from 0.60 (whole passages) to 0.77 (300-character windows), hybrid's from
0.63 to 0.70, for about the same tokens embedded. A blob of one vector (an index written before
windows) is a passage of one window and is searched alike. Searching loads a collection's vectors into one numpy
matrix, kept between searches on the Library and loaded again only when the collection's vectors
changed (their count and largest row id: ids are never reused), and scores every passage with
one matrix product: exact search, not approximate. The matrix is kept as float32 (numpy converts
float16 slowly: scoring straight from float16 took 12 times as long) up to FLOAT32_BYTES, beyond
that as float16, converted a block at a time while scoring.

Why not sqlite-vec: it is a compiled SQLite extension, so the desktop bundle would have to carry
and sign a native library per platform, and Python builds without enable_load_extension (macOS's
system Python, some distributions) could not use it at all; and its vec0 tables search by brute
force too, so it would buy no speed. A desktop library of 10,000 to 100,000 passages, about four
windows each, is 60 to 600 MB of float16 at 768 dimensions (half that at MiniLM's 384); on this
project's 2-core CPU one search scored 10,000 vectors in 2.5 ms and 100,000 in 30 ms (float32 in
memory). Float16 halves the index's size against float32 and
moves a cosine by about 0.001, far less than the gap between a relevant passage and an irrelevant
one. Vectors in the index itself also share its transactions: a passage deleted (its file changed,
vanished or left the collection) takes its vectors with it, by a trigger, in the same transaction.

The pass (`update`) runs after keyword indexing, so search works at once and vectors fill in:
it embeds the collection's passages that have no vector for this model yet, a batch at a time,
each batch stored in its own transaction. Stopped at any point (cancel, a crash, kill -9), it
keeps every batch stored and goes on from there; pause and cancel are the indexer's Controls. A
passage whose text changed between being read and its vector being stored gets no vector (the
next pass embeds the new text).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.documents.indexer import Controls
from engine.documents.library import Library, LibraryError

BATCH = 32  # passages embedded and stored per transaction
WINDOW_CHARS = 300  # of a passage's text per embedded window
WINDOW_OVERLAP = 100  # characters a window repeats of the one before, so no sentence is only ever cut
SCORE_ROWS = 16384  # rows turned to float32 at a time when scoring a float16 matrix
FLOAT32_BYTES = 256 << 20  # a collection's matrix is kept as float32 up to this size (~87,000 vectors of 768)


class PassageEmbedder(Protocol):
    """What the pass and the search need of an embedder (embeddings.Embedder is one)."""

    key: str

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, question: str) -> np.ndarray: ...


@dataclass
class VectorProgress:
    """Where a vector pass stands, for a progress bar."""

    total: int = 0  # passages without a vector when the pass started
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def per_second(self) -> float:
        return self.done / max(self.elapsed_s, 1e-6)

    @property
    def seconds_left(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        return (self.total - self.done) / self.per_second


@dataclass
class VectorReport:
    embedded: int = 0  # vectors stored in this pass
    skipped: int = 0  # passages that changed while being embedded (the next pass does them)
    cancelled: bool = False


def document_text(heading: str, text: str) -> str:
    """What is embedded for a window of a passage: its heading path (the words a question may use
    for its section) and its text."""
    return f"{heading}\n{text}" if heading else text


def windows(text: str, size: int = WINDOW_CHARS, overlap: int = WINDOW_OVERLAP) -> list[str]:
    """The passage's text in windows of about size characters, cut between words, each starting
    about overlap characters before the last one ended; a short text is one window."""
    words = text.split()
    out: list[str] = []
    start = 0
    while True:
        end, length = start, 0
        while end < len(words) and (length < size or end == start):
            length += len(words[end]) + 1
            end += 1
        out.append(" ".join(words[start:end]))
        if end >= len(words):
            return out
        back, length = end, 0
        while back > start + 1 and length < overlap:
            back -= 1
            length += len(words[back]) + 1
        start = back


def missing(library: Library, collection: str, model: str) -> int:
    """Passages of the collection without a vector for this model."""
    row = library.db.execute(
        "SELECT COUNT(*) FROM passages JOIN files ON files.id = passages.file_id WHERE files.collection = ?"
        " AND NOT EXISTS (SELECT 1 FROM vectors WHERE vectors.passage_id = passages.id AND vectors.model = ?)",
        (collection, model),
    ).fetchone()
    return int(row[0])


def counts(library: Library, collection: str, model: str) -> int:
    """Vectors stored for the collection's passages by this model."""
    row = library.db.execute(
        "SELECT COUNT(*) FROM vectors WHERE model = ? AND collection = ?", (model, collection)
    ).fetchone()
    return int(row[0])


def update(
    library: Library,
    name: str,
    embedder: PassageEmbedder,
    on_progress: Callable[[VectorProgress], None] | None = None,
    controls: Controls | None = None,
    batch: int = BATCH,
) -> VectorReport:
    """Embed the collection's passages that have no vector for this embedder's model; see the
    module's docstring. LibraryError when the index cannot be written (a full disk)."""
    controls = controls or Controls()
    library.collection(name)  # an unknown name says so
    report = VectorReport()
    progress = VectorProgress(total=missing(library, name, embedder.key))
    if on_progress:
        on_progress(progress)
    after = 0  # passage ids are walked upwards, so each batch query starts where the last ended
    while True:
        if not controls.wait_if_paused():
            report.cancelled = True
            break
        rows = library.db.execute(
            "SELECT passages.id, passages.heading, passages.text FROM passages"
            " JOIN files ON files.id = passages.file_id WHERE files.collection = ? AND passages.id > ?"
            " AND NOT EXISTS (SELECT 1 FROM vectors WHERE vectors.passage_id = passages.id AND vectors.model = ?)"
            " ORDER BY passages.id LIMIT ?",
            (name, after, embedder.key, batch),
        ).fetchall()
        if not rows:
            break
        after = rows[-1][0]
        parts = [[document_text(heading, w) for w in windows(text)] for _, heading, text in rows]
        embedded = embedder.embed_documents([w for p in parts for w in p])
        bounds = np.cumsum([0] + [len(p) for p in parts])
        blobs = [embedded[bounds[i] : bounds[i + 1]].astype(np.float16).tobytes() for i in range(len(rows))]
        try:
            stored = _store(library, name, embedder.key, rows, blobs)
        except sqlite3.OperationalError as e:
            raise LibraryError(
                f"Embedding stopped: the index could not be written ({e}). "
                f"The {report.embedded} vectors stored so far are kept; free some space and index again."
            ) from None
        report.embedded += stored
        report.skipped += len(rows) - stored
        progress.done += len(rows)
        if on_progress:
            on_progress(progress)
    return report


def _store(library: Library, collection: str, model: str, rows: list, blobs: list[bytes]) -> int:
    """One transaction; a passage stored only if it still holds the text that was embedded."""
    with library.db:
        before = library.db.total_changes
        library.db.executemany(
            "INSERT OR IGNORE INTO vectors (passage_id, model, collection, vector) SELECT ?, ?, ?, ?"
            " WHERE EXISTS (SELECT 1 FROM passages WHERE id = ? AND heading = ? AND text = ?)",
            [(pid, model, collection, blobs[i], pid, heading, text) for i, (pid, heading, text) in enumerate(rows)],
        )
        return library.db.total_changes - before


@dataclass(frozen=True)
class _Loaded:
    version: tuple[int, int]  # (count, largest id) of the collection's vectors when loaded
    ids: np.ndarray  # passage ids, int64, one per passage
    starts: np.ndarray  # the matrix row of each passage's first window (its windows are consecutive)
    matrix: np.ndarray  # (windows, dim) unit rows: float32, or float16 for a very large collection


def _loaded(library: Library, collection: str, model: str, dim: int) -> _Loaded | None:
    """The collection's vectors for this model, from the Library's cache while they are unchanged."""
    version = library.db.execute(
        "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM vectors WHERE model = ? AND collection = ?", (model, collection)
    ).fetchone()
    version = (int(version[0]), int(version[1]))
    cached = library.vector_cache.get((collection, model))
    if cached is not None and cached.version == version and cached.matrix.shape[1] == dim:
        return cached
    library.vector_cache.pop((collection, model), None)
    if version[0] == 0:
        return None
    rows = library.db.execute(
        "SELECT passage_id, vector FROM vectors WHERE model = ? AND collection = ? ORDER BY id", (model, collection)
    ).fetchall()
    rows = [r for r in rows if r[1] and len(r[1]) % (2 * dim) == 0]  # another model's size under its key: unusable
    if not rows:
        return None
    counts = np.fromiter((len(r[1]) // (2 * dim) for r in rows), dtype=np.int64, count=len(rows))
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16).reshape(-1, dim)
    if matrix.size * 4 <= FLOAT32_BYTES:
        matrix = matrix.astype(np.float32)
    loaded = _Loaded(version, ids, starts, matrix)
    library.vector_cache[(collection, model)] = loaded
    return loaded


def nearest(library: Library, collections: list[str], model: str, query: np.ndarray, n: int) -> list[tuple[int, float]]:
    """Up to n (passage id, cosine of its best window) of these collections closest to the query
    vector, best first; [] when none of them has vectors for this model."""
    found_ids, found_scores = [], []
    query = np.asarray(query, dtype=np.float32)
    for collection in collections:
        loaded = _loaded(library, collection, model, query.shape[0])
        if loaded is None:
            continue
        if loaded.matrix.dtype == np.float32:
            windows_scores = loaded.matrix @ query
        else:
            blocks = range(0, len(loaded.matrix), SCORE_ROWS)
            windows_scores = np.concatenate(
                [loaded.matrix[i : i + SCORE_ROWS].astype(np.float32) @ query for i in blocks]
            )
        scores = np.maximum.reduceat(windows_scores, loaded.starts)  # each passage by its best window
        top = np.argpartition(-scores, min(n, len(scores)) - 1)[:n] if len(scores) > n else np.arange(len(scores))
        found_ids.append(loaded.ids[top])
        found_scores.append(scores[top])
    if not found_ids:
        return []
    ids, scores = np.concatenate(found_ids), np.concatenate(found_scores)
    order = np.argsort(-scores, kind="stable")[:n]
    return [(int(ids[i]), float(scores[i])) for i in order]
