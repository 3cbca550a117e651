"""Opening the chat database at start, whatever state the file is in.

The app must start and stay usable even when `chats.sqlite3` cannot be used as it is:

- damaged (truncated, garbage, fails SQLite's quick check): the file (and its -wal/-shm
  companions) is renamed to `chats.sqlite3.damaged-<time>`, never overwritten or deleted,
  and a new, empty history starts in its place;
- not writable (a read-only file or folder, another owner): the chats are copied into memory
  and shown; new messages work but are not saved, until the file can be written again;
- written by a newer Specula, or not even readable: an empty history in memory.

Each case comes with a notice for the user saying what happened and where the file is.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from app.core import set_aside
from app.core.store import DB_NAME, Store, StoreError
from engine.paths import data_dir
from engine.sqlite_damage import is_corruption

# SQLite's primary result codes (extended codes carry them in the low byte).
COMPANIONS = ("-wal", "-shm", "-journal")


class DamagedDatabase(Exception):
    """SQLite opened the file but its own check found damage; str() says what."""


@dataclass
class OpenedStore:
    store: Store
    notice: str | None = None  # what the user must be told; None when all is well
    moved_to: Path | None = None  # where a damaged file was moved


def open_chat_store(path: Path | str | None = None) -> OpenedStore:
    """The app's Store, and what to tell the user when the file could not be used as it is."""
    try:
        path = Path(path) if path else data_dir() / DB_NAME
    except OSError as e:  # the data folder itself cannot be created
        return OpenedStore(_memory_store(Path(DB_NAME)), _not_kept(f"Specula cannot create its data folder ({e})."))
    # Checked read-only first: a read-write connection to a damaged file may checkpoint its
    # -wal into it and delete the -wal on close, and that would lose the newest chats.
    damage = damage_of(path)
    if damage is not None:
        return _replace_damaged(path, DamagedDatabase(damage))
    try:
        return OpenedStore(Store(path))
    except (sqlite3.Error, OSError, StoreError) as e:
        failure = e
    if isinstance(failure, StoreError):  # a newer schema: leave the file alone
        return OpenedStore(_memory_store(path), _not_kept(str(failure)))
    if is_damage(failure):
        return _replace_damaged(path, failure)
    return _read_only(path, failure)


def is_damage(error: BaseException) -> bool:
    """True when the file's content is the problem (not permissions, locks or space)."""
    return isinstance(error, DamagedDatabase) or is_corruption(error)


def damage_of(path: Path) -> str | None:
    """What is wrong with the file's content, read without writing a byte; None when it looks whole
    (or is missing, empty, or cannot be read: those are not damage)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if not head:
        return None  # SQLite makes an empty file a new database
    if head != b"SQLite format 3\x00":
        return "it is not an SQLite database"
    # mode=ro still needs the -shm of a WAL database; immutable reads a file nobody may write.
    for flags in ("mode=ro", "immutable=1"):
        try:
            db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{flags}", uri=True)
        except sqlite3.Error:
            continue
        try:
            rows = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
            return None if rows == ["ok"] else "; ".join(rows)
        except sqlite3.Error as e:
            if is_damage(e):
                return str(e)
        finally:
            db.close()
    return None


def _checked(store: Store) -> Store:
    """The store, after SQLite's quick check (a truncated file can open and fail later)."""
    rows = [r[0] for r in store.db.execute("PRAGMA quick_check(3)")]
    if rows != ["ok"]:
        store.close()
        raise DamagedDatabase("; ".join(rows))
    return store


def _replace_damaged(path: Path, failure: BaseException) -> OpenedStore:
    reason = _reason(failure)
    try:
        moved = move_aside(path)
    except OSError as e:
        return OpenedStore(
            _memory_store(path),
            _not_kept(
                f"{path} is damaged ({reason}) and could not be moved aside ({e.strerror or e}); it was left as it is."
            ),
        )
    told = (
        f"{path.name} in {path.parent} is damaged ({reason}), so Specula could not read your chats.\n"
        f"The file was kept as {moved.name}; nothing was deleted "
        "(SQLite's own tool can often recover most of it: sqlite3 FILE .recover).\n"
    )
    try:
        store = Store(path)
    except (sqlite3.Error, OSError, StoreError) as e:
        return OpenedStore(
            _memory_store(path), _not_kept(told + f"A new history could not be created ({_reason(e)})."), moved
        )
    return OpenedStore(store, told + "Specula started a new, empty history.", moved)


def move_aside(path: Path) -> Path:
    """Rename path to a free '<name>.damaged-<time>'; its -wal (committed chats not yet in the
    main file) and -shm travel with it."""
    return set_aside.move_aside(path, COMPANIONS)


def _read_only(path: Path, failure: BaseException) -> OpenedStore:
    reason = _reason(failure)
    copy = _memory_copy(path)
    if copy is None:
        return OpenedStore(_memory_store(path), _not_kept(f"Specula cannot open or create {path} ({reason})."))
    try:
        store = _checked(Store(path, db=copy))
    except (sqlite3.Error, StoreError, DamagedDatabase) as e:
        copy.close()
        return OpenedStore(
            _memory_store(path), _not_kept(f"{path} cannot be written ({reason}) or read ({_reason(e)}).")
        )
    return OpenedStore(
        store,
        f"Specula cannot write to {path} ({reason}).\n"
        "Your chats are shown, and you can keep chatting, but nothing new is saved: "
        "it is gone when Specula closes.\n"
        f"To save again, let your user account write to that file and to its folder {path.parent}, "
        "then restart Specula.",
    )


def _memory_copy(path: Path) -> sqlite3.Connection | None:
    """The database copied into memory, read without writing a byte; None if unreadable."""
    if not path.is_file():
        return None
    for flags in ("mode=ro", "immutable=1"):  # as in damage_of
        source = None
        try:
            source = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{flags}", uri=True)
            memory = sqlite3.connect(":memory:", isolation_level=None)
            source.backup(memory)
            return memory
        except sqlite3.Error:
            continue
        finally:
            if source is not None:
                source.close()
    return None


def _memory_store(path: Path) -> Store:
    return Store(path, db=sqlite3.connect(":memory:", isolation_level=None))


def _not_kept(problem: str) -> str:
    return (
        problem + "\nSpecula started with an empty history kept in memory: the chats of this session will not be saved."
    )


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
