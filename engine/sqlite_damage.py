"""Whether an SQLite error means the file's content is damaged, as opposed to a lock, permissions or
a full disk: only damage justifies setting a file aside (the chats' store, the document index)."""

from __future__ import annotations

SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26


def is_corruption(error: BaseException) -> bool:
    """SQLite's CORRUPT or NOTADB (extended codes included); Python before 3.11 gives no code, so
    there SQLite's own words for them are read."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)
    return any(words in str(error) for words in ("database disk image is malformed", "file is not a database"))
