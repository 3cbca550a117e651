"""A damaged, read-only or unreachable chats.sqlite3: the app opens, says so, and loses nothing.

Real SQLite files through the real Store. Read-only cases need a user the kernel refuses
writes to: root ignores file modes (os.access says yes), so as root the check runs in a
subprocess as `nobody` through setpriv; as any other user it runs in a subprocess directly.
Each such subprocess first proves the write is really refused (os.access), then opens the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.core.store import SCHEMA_VERSION, Store
from app.core.store_open import is_damage, open_chat_store

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def make_history(path: Path, n: int = 3) -> None:
    """A real chat database with n conversations, closed cleanly (no -wal left)."""
    store = Store(path)
    for i in range(n):
        conv = store.create_conversation(f"chat {i}")
        store.add_message(conv.id, "user", f"question {i} " * 40)
        store.add_message(conv.id, "assistant", f"answer {i} " * 60)
    store.close()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


DAMAGE = [
    "garbage header",
    "random bytes",
    "truncated to 50 bytes",
    "truncated to 100 bytes",
    "truncated to one page",
    "truncated mid-page",
    "last page cut off",
    "text file",
]


def damaged_copies(good: Path) -> dict[str, bytes]:
    data = good.read_bytes()
    assert len(data) > 3 * 4096
    return {
        "garbage header": os.urandom(100) + data[100:],
        "random bytes": os.urandom(len(data)),
        "truncated to 50 bytes": data[:50],
        "truncated to 100 bytes": data[:100],
        "truncated to one page": data[:4096],
        "truncated mid-page": data[: len(data) // 2 + 123],
        "last page cut off": data[:-4096],
        "text file": b"these are my notes, not a database\n" * 50,
    }


@pytest.fixture(scope="module")
def good_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("good") / "chats.sqlite3"
    make_history(path, n=40)  # several pages, so truncation hits real data
    return path


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_database_is_moved_aside_and_a_new_history_starts(tmp_path, good_db, name):
    content = damaged_copies(good_db)[name]
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(content)

    opened = open_chat_store(path)

    assert opened.moved_to is not None, name
    assert opened.moved_to.read_bytes() == content  # kept byte for byte, never overwritten
    assert opened.moved_to.name.startswith("chats.sqlite3.damaged-")
    assert (
        "damaged" in opened.notice and opened.moved_to.name in opened.notice and "nothing was deleted" in opened.notice
    )
    store = opened.store
    assert store.saved and store.conversations() == []
    conv = store.create_conversation("after the damage")
    store.close()
    reopened = Store(path)  # the new history is on disk
    assert [c.title for c in reopened.conversations()] == [conv.title]
    reopened.close()


def test_moving_aside_never_overwrites_an_earlier_damaged_copy(tmp_path):
    path = tmp_path / "chats.sqlite3"
    asides = []
    for i in range(3):
        path.write_bytes(f"garbage {i} ".encode() * 100)
        opened = open_chat_store(path)
        opened.store.close()
        asides.append(opened.moved_to)
        path.unlink()
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
    assert len(set(asides)) == 3
    assert [a.read_bytes()[:9] for a in asides] == [b"garbage 0", b"garbage 1", b"garbage 2"]


def test_the_wal_of_a_damaged_database_travels_with_it(tmp_path):
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"x" * 5000)
    wal = path.with_name("chats.sqlite3-wal")
    wal.write_bytes(b"committed but not yet checkpointed")
    opened = open_chat_store(path)
    opened.store.close()
    assert Path(str(opened.moved_to) + "-wal").read_bytes() == b"committed but not yet checkpointed"
    assert opened.moved_to.read_bytes() == b"x" * 5000


def test_a_database_from_a_newer_specula_is_left_alone(tmp_path):
    path = tmp_path / "chats.sqlite3"
    make_history(path, n=1)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 5,))
    con.close()
    before = sha(path)
    opened = open_chat_store(path)
    assert "newer version" in opened.notice and "will not be saved" in opened.notice
    assert not opened.store.saved and opened.moved_to is None
    opened.store.create_conversation("in memory")  # the app keeps working
    opened.store.close()
    assert sha(path) == before


def test_damage_is_told_apart_from_permission_problems():
    def error(code: int) -> sqlite3.Error:
        e = sqlite3.DatabaseError("x")
        e.sqlite_errorcode = code
        return e

    assert is_damage(error(11)) and is_damage(error(26)) and is_damage(error(11 | 1 << 8))
    assert not is_damage(error(8)) and not is_damage(error(14)) and not is_damage(PermissionError(13, "no"))


# -- permissions: in a subprocess, as a user the kernel refuses writes to -------------------------

PROBE = r"""
import json, os, sys
from pathlib import Path
from app.core.store_open import open_chat_store
path = Path(sys.argv[1])
folder_writable = os.access(path.parent, os.W_OK)
file_writable = os.access(path, os.W_OK) if path.exists() else None
opened = open_chat_store(path)
store = opened.store
titles = [c.title for c in store.conversations()]
conv = store.create_conversation("typed while read-only")  # the app keeps working in memory
store.add_message(conv.id, "user", "hello")
print(json.dumps({
    "uid": os.getuid(), "folder_writable": folder_writable, "file_writable": file_writable,
    "notice": opened.notice, "saved": store.saved, "titles": titles,
    "after": len(store.conversations()), "moved_to": str(opened.moved_to) if opened.moved_to else None,
}))
store.close()
"""


@pytest.fixture
def shared_dir():
    """A folder another user can reach (pytest's tmp_path lives under a root-only 0700 folder)."""
    base = Path(tempfile.mkdtemp(prefix="specula-ro-"))
    base.chmod(0o755)
    yield base
    for p in [base, *base.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(base)


def run_probe(db: Path) -> dict:
    cmd = [sys.executable, "-c", PROBE, str(db)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, which ignores file modes, and setpriv is not installed")
        cmd = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", HOME=str(db.parent))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def give_away(*paths: Path) -> None:
    """Make paths belong to the probe's user (when we are root), as a user's own files would."""
    if os.geteuid() == 0:
        for p in paths:
            os.chown(p, NOBODY, NOBODY)


def users_history(shared_dir: Path, n: int) -> tuple[Path, Path]:
    """A data folder holding a chat database, both the probe user's own."""
    folder = shared_dir / "home"
    folder.mkdir()
    db = folder / "chats.sqlite3"
    make_history(db, n=n)
    give_away(folder, db)
    return folder, db


def test_a_read_only_file_is_shown_and_left_untouched(shared_dir):
    folder, db = users_history(shared_dir, 3)
    db.chmod(0o444)
    before = sha(db)

    result = run_probe(db)

    assert result["file_writable"] is False  # the kernel really refuses the write
    assert result["titles"] == ["chat 2", "chat 1", "chat 0"]  # the history is shown
    assert result["saved"] is False and result["after"] == 4
    assert "cannot write" in result["notice"] and "nothing new is saved" in result["notice"]
    assert str(db) in result["notice"]
    assert sha(db) == before and not list(folder.glob("*.damaged-*"))


def test_a_read_only_folder_with_a_writable_file_is_shown_and_left_untouched(shared_dir):
    folder, db = users_history(shared_dir, 2)
    folder.chmod(0o555)
    before = sha(db)

    result = run_probe(db)

    assert result["folder_writable"] is False and result["file_writable"] is True
    assert result["titles"] == ["chat 1", "chat 0"] and result["saved"] is False
    assert "cannot write" in result["notice"]
    assert sha(db) == before and sorted(p.name for p in folder.iterdir()) == ["chats.sqlite3"]


def test_a_read_only_folder_without_a_database_starts_an_empty_history_in_memory(shared_dir):
    folder = shared_dir / "home"
    folder.mkdir()
    give_away(folder)
    folder.chmod(0o555)

    result = run_probe(folder / "chats.sqlite3")

    assert result["folder_writable"] is False
    assert result["titles"] == [] and result["after"] == 1 and result["saved"] is False
    assert "cannot open or create" in result["notice"] and "will not be saved" in result["notice"]
    assert list(folder.iterdir()) == []


def test_a_damaged_database_in_a_read_only_folder_is_left_as_it_is(shared_dir):
    folder = shared_dir / "home"
    folder.mkdir()
    db = folder / "chats.sqlite3"
    db.write_bytes(b"not a database " * 500)
    give_away(folder, db)
    folder.chmod(0o555)
    before = sha(db)

    result = run_probe(db)

    assert result["folder_writable"] is False and result["moved_to"] is None
    assert result["titles"] == [] and result["saved"] is False
    assert "will not be saved" in result["notice"]
    assert sha(db) == before
