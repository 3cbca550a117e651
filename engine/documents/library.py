"""The document library on disk: which collections exist and what they hold, and their index.

    documents/collections.json   the collections and their sources (folders, files): the user's choices,
                                 small, written whole (engine.json_file)
    documents/index.sqlite3      what was read of each file, its passages, their full-text index and
                                 their vectors (vectors.py): derived from the files, so a damaged one
                                 is set aside and rebuilt

The index is SQLite in WAL mode: the indexer writes on its own connection while searches read on
theirs. Each file is written in one transaction with its size, modification time and SHA-256,
which is what makes indexing resumable: a file either is in the index whole, with the state it was
read in, or is not there at all. A passage's vectors go with it: a trigger deletes them when the
passage is deleted (its file changed, vanished or left the collection).

collections.json also names the embedding model the user chose for the library ("embedding_model",
a GGUF path; absent: keyword search only) and the model that reorders what a search found
("reranking_model", a text-generation GGUF; absent: the search's order).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.documents import cjk
from engine.errors import EngineError
from engine.json_file import write_json
from engine.sqlite_damage import is_corruption

log = logging.getLogger(__name__)

# How long an open waits for another connection's write (another thread, the terminal, the server)
# before saying the index is busy; a busy index is never mistaken for a damaged one.
BUSY_TIMEOUT_S = 30.0
# Passages of the documents put before a question, at most (as many of them as fit the context go in):
# a small model loses its way in more than about 6. The user may choose up to MAX_PASSAGES, the number
# found and drafted from anyway.
PASSAGES_KEY = "passages_per_question"
DEFAULT_PASSAGES = 6
MAX_PASSAGES = 24
SCHEMA_VERSION = 2  # 2: passages_grams (cjk.py); a version-1 index gains it, filled from its passages
# Chinese, Japanese and Korean runs only, by three characters (cjk.py): contentless, nothing stored twice.
# SQLite's trigram tokenizer came with 3.34 (2020); an older SQLite searches those runs by words only.
GRAMS = sqlite3.sqlite_version_info >= (3, 34, 0)
GRAMS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS passages_grams USING fts5(text, content='', tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS passages_added_grams AFTER INSERT ON passages
WHEN cjk_runs(new.heading || ' ' || new.text) != '' BEGIN
    INSERT INTO passages_grams(rowid, text) VALUES (new.id, cjk_runs(new.heading || ' ' || new.text));
END;
CREATE TRIGGER IF NOT EXISTS passages_removed_grams AFTER DELETE ON passages
WHEN cjk_runs(old.heading || ' ' || old.text) != '' BEGIN
    INSERT INTO passages_grams(passages_grams, rowid, text) VALUES ('delete', old.id, cjk_runs(old.heading || ' ' || old.text));
END;
"""
SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',  -- why it could not be read ('' when indexed)
    passages INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL NOT NULL,
    UNIQUE (collection, path)
);
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id),
    ord INTEGER NOT NULL,
    page INTEGER,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    heading TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS passages_of_file ON passages(file_id);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
    heading, text, content='passages', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS passages_added AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS passages_removed AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
END;
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: (count, largest id) tells a cache what changed
    passage_id INTEGER NOT NULL REFERENCES passages(id),
    model TEXT NOT NULL,  -- embeddings.model_key: file name, size, hash of the header
    collection TEXT NOT NULL,  -- the passage's, to load a collection's vectors without a join
    vector BLOB NOT NULL,  -- float16, unit length
    UNIQUE (passage_id, model)
);
CREATE INDEX IF NOT EXISTS vectors_of_collection ON vectors(model, collection);
CREATE TRIGGER IF NOT EXISTS passages_removed_vectors AFTER DELETE ON passages BEGIN
    DELETE FROM vectors WHERE passage_id = old.id;
END;
"""


class LibraryError(EngineError):
    """The library cannot do what was asked; str() says why."""


@dataclass
class Collection:
    name: str
    sources: list[str] = field(default_factory=list)  # absolute paths of folders and files


@dataclass(frozen=True)
class FileState:
    """A file as the index last saw it."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    error: str
    passages: int


class Library:
    """The collections (definitions) and a connection to their index; one per thread that uses it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.definitions = self.root / "collections.json"
        self.index_file = self.root / "index.sqlite3"
        self.rebuilt = ""  # why the index was set aside and started again at open ("" when it was not)
        self.db = self._open_index()
        self.vector_cache: dict = {}  # vectors.py's loaded matrices, per (collection, model), checked before use

    # -- collections ------------------------------------------------------------------------------

    def collections(self) -> list[Collection]:
        return read_collections(self.root)

    def collection(self, name: str) -> Collection:
        found = next((c for c in self.collections() if c.name == name), None)
        if found is None:
            raise LibraryError(f"There is no collection named {name!r}.")
        return found

    def add_collection(self, name: str) -> Collection:
        name = name.strip()
        if not name:
            raise LibraryError("A collection needs a name.")
        collections = self.collections()
        if any(c.name == name for c in collections):
            raise LibraryError(f"There is already a collection named {name!r}.")
        collections.append(Collection(name))
        self._save(collections)
        return collections[-1]

    def add_sources(self, name: str, paths: list[str | Path]) -> Collection:
        collections = self.collections()
        target = next((c for c in collections if c.name == name), None)
        if target is None:
            raise LibraryError(f"There is no collection named {name!r}.")
        for path in paths:
            absolute = str(Path(path).expanduser().resolve())
            if not Path(absolute).exists():
                raise LibraryError(f"{path} does not exist.")
            if absolute not in target.sources:
                target.sources.append(absolute)
        self._save(collections)
        return target

    def remove_source(self, name: str, path: str) -> None:
        """The source leaves the collection, and what was indexed from it (unless another source holds it) the index."""
        collections = self.collections()
        for c in collections:
            if c.name == name and path in c.sources:
                c.sources.remove(path)
                with self.db:
                    for indexed in self.file_states(name):
                        if under(indexed, path) and not any(under(indexed, s) for s in c.sources):
                            self._drop_files("collection = ? AND path = ?", (name, indexed))
        self._save(collections)

    def remove_collection(self, name: str) -> None:
        self._save([c for c in self.collections() if c.name != name])
        with self.db:
            self._drop_files("collection = ?", (name,))

    def embedding_model(self) -> str | None:
        """The embedding model's path the user chose (None: keyword search only)."""
        return self._model_path("embedding_model")

    def set_embedding_model(self, path: str | Path | None) -> None:
        """Choose the library's embedding model (None: none). Vectors of another model stay in the
        index, unused, so choosing that model again needs no new pass."""
        self._set_model_path("embedding_model", path)

    def reranking_model(self) -> str | None:
        """The text-generation model's path the user chose to reorder search results (None: none)."""
        return self._model_path("reranking_model")

    def set_reranking_model(self, path: str | Path | None) -> None:
        self._set_model_path("reranking_model", path)

    def passages_per_question(self) -> int:
        """How many of the passages found go before a question, at most (as many as fit the context)."""
        return passages_per_question(self._definitions())

    def set_passages_per_question(self, n: int) -> None:
        self._set_definition(PASSAGES_KEY, max(1, min(int(n), MAX_PASSAGES)))

    def _model_path(self, key: str) -> str | None:
        value = self._definitions().get(key)
        return value if isinstance(value, str) and value else None

    def _set_model_path(self, key: str, path: str | Path | None) -> None:
        self._set_definition(key, None if path is None else str(Path(path).expanduser().resolve()))

    def _set_definition(self, key: str, value) -> None:
        """One setting of the library in its definitions file (None: removed), the collections kept."""
        data = self._definitions()
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
        data.setdefault("collections", [])
        write_json(self.definitions, data)

    def _definitions(self) -> dict:
        return read_definitions(self.root)

    def _save(self, collections: list[Collection]) -> None:
        data = self._definitions()  # keeps the other settings (the models chosen)
        data["collections"] = [{"name": c.name, "sources": c.sources} for c in collections]
        write_json(self.definitions, data)

    # -- the index --------------------------------------------------------------------------------

    def file_states(self, collection: str) -> dict[str, FileState]:
        rows = self.db.execute(
            "SELECT path, size, mtime_ns, sha256, error, passages FROM files WHERE collection = ?", (collection,)
        )
        return {row[0]: FileState(*row) for row in rows}

    def store_file(self, collection: str, state: FileState, passages: list) -> None:
        """The file's passages replace what the index held of it, in one transaction."""
        with self.db:
            file_id = self._file_id(collection, state.path)
            if file_id is not None:
                self.db.execute("DELETE FROM passages WHERE file_id = ?", (file_id,))
            self.db.execute(
                "INSERT INTO files (collection, path, size, mtime_ns, sha256, error, passages, indexed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (collection, path) DO UPDATE SET size = excluded.size,"
                " mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, error = excluded.error,"
                " passages = excluded.passages, indexed_at = excluded.indexed_at",
                (
                    collection,
                    state.path,
                    state.size,
                    state.mtime_ns,
                    state.sha256,
                    state.error,
                    len(passages),
                    time.time(),
                ),
            )
            file_id = self._file_id(collection, state.path)
            self.db.executemany(
                "INSERT INTO passages (file_id, ord, page, line_start, line_end, heading, text)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(file_id, i, p.page, p.line_start, p.line_end, p.heading, p.text) for i, p in enumerate(passages)],
            )

    def touch_file(self, collection: str, path: str, size: int, mtime_ns: int) -> None:
        """The file was saved again with the same content: remember its new time, read nothing."""
        with self.db:
            self.db.execute(
                "UPDATE files SET size = ?, mtime_ns = ? WHERE collection = ? AND path = ?",
                (size, mtime_ns, collection, path),
            )

    def drop_file(self, collection: str, path: str) -> None:
        with self.db:
            self._drop_files("collection = ? AND path = ?", (collection, path))

    def _drop_files(self, where: str, args: tuple) -> None:
        ids = [r[0] for r in self.db.execute(f"SELECT id FROM files WHERE {where}", args)]
        self.db.executemany("DELETE FROM passages WHERE file_id = ?", [(i,) for i in ids])
        self.db.executemany("DELETE FROM files WHERE id = ?", [(i,) for i in ids])

    def _file_id(self, collection: str, path: str) -> int | None:
        row = self.db.execute("SELECT id FROM files WHERE collection = ? AND path = ?", (collection, path)).fetchone()
        return row[0] if row else None

    def counts(self, collection: str) -> tuple[int, int, int]:
        """(files indexed, passages, files that could not be read)."""
        row = self.db.execute(
            "SELECT COUNT(*) FILTER (WHERE error = ''), COALESCE(SUM(passages), 0), COUNT(*) FILTER (WHERE error != '')"
            " FROM files WHERE collection = ?",
            (collection,),
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def errors(self, collection: str) -> list[tuple[str, str]]:
        """(path, why) of each file that could not be read."""
        rows = self.db.execute(
            "SELECT path, error FROM files WHERE collection = ? AND error != '' ORDER BY path", (collection,)
        )
        return [(r[0], r[1]) for r in rows]

    def close(self) -> None:
        self.db.close()

    def _open_index(self) -> sqlite3.Connection:
        try:
            return _connect(self.index_file)
        except sqlite3.DatabaseError as e:
            if not _is_damage(e):  # busy (another program writing it for BUSY_TIMEOUT_S), unreadable, no space
                raise LibraryError(f"The document index {self.index_file} cannot be opened now: {e}.") from None
            # Derived data: set the damaged file aside (for a bug report) and start again from the files.
            aside = self.index_file.with_name(f"index.damaged-{time.strftime('%Y%m%d-%H%M%S')}.sqlite3")
            for suffix in ("", "-wal", "-shm"):
                part = Path(str(self.index_file) + suffix)
                if part.exists():
                    part.replace(Path(str(aside) + suffix))
            self.rebuilt = f"The document index was damaged ({e}); it was set aside as {aside.name} and is built again."
            log.warning(self.rebuilt)
            return _connect(self.index_file)


def passages_per_question(definitions: dict) -> int:
    """The setting as collections.json holds it (DEFAULT_PASSAGES when missing or not a count)."""
    n = definitions.get(PASSAGES_KEY)
    return max(1, min(n, MAX_PASSAGES)) if isinstance(n, int) and not isinstance(n, bool) else DEFAULT_PASSAGES


def read_definitions(root: Path) -> dict:
    """collections.json as read ({} when missing or unreadable), without opening the index."""
    try:
        data = json.loads((Path(root) / "collections.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_collections(root: Path) -> list[Collection]:
    """The collections defined in the library at root, without opening its index (a quick read of a small file)."""
    definitions = Path(root) / "collections.json"
    try:
        data = json.loads(definitions.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        log.warning("%s is unreadable (%s): no collections", definitions, e)
        return []
    items = data.get("collections", []) if isinstance(data, dict) else []
    return [
        Collection(str(c["name"]), [str(s) for s in c.get("sources", []) if isinstance(s, str)])
        for c in items
        if isinstance(c, dict) and isinstance(c.get("name"), str)
    ]


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class DamagedIndex(sqlite3.DatabaseError):
    """The index's content is wrong (a failed check, a schema this Specula does not know)."""


def _is_damage(error: sqlite3.DatabaseError) -> bool:
    """The file's content is the problem, not a lock, permissions or space: only then is it set aside."""
    return isinstance(error, DamagedIndex) or is_corruption(error)


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: a power cut may lose the last files, never corrupt
        db.create_function("cjk_runs", 1, cjk.runs, deterministic=True)  # the triggers of passages_grams
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, SCHEMA_VERSION):
            raise DamagedIndex(f"schema version {version}, this Specula knows {SCHEMA_VERSION}")
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise DamagedIndex(check)
        if version != SCHEMA_VERSION:
            _create_or_upgrade(db)
        assert not db.in_transaction, "an open leaves no transaction: it would hold other connections' writes"
        return db
    except BaseException:
        db.close()
        raise


def _create_or_upgrade(db: sqlite3.Connection) -> None:
    """The tables, a version-1 index's CJK pieces, the FTS ranking: one transaction that waits for
    other writers (IMMEDIATE), and does nothing twice when another connection did it first."""
    upgrade = ""
    if GRAMS:  # an index from before passages_grams: its passages' runs go in now (a version-1 index only)
        upgrade = (
            "INSERT INTO passages_grams(rowid, text) SELECT id, cjk_runs(heading || ' ' || text) FROM passages"
            " WHERE cjk_runs(heading || ' ' || text) != '' AND (SELECT user_version FROM pragma_user_version) = 1;"
        )
    db.executescript(
        "BEGIN IMMEDIATE;"
        + SCHEMA
        + (GRAMS_SCHEMA if GRAMS else "")
        + upgrade
        + "INSERT INTO passages_fts(passages_fts, rank) VALUES ('rank', 'bm25(2.0, 1.0)');"
        + f"PRAGMA user_version = {SCHEMA_VERSION};"
        + "COMMIT;"
    )
