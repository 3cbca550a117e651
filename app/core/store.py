"""Conversations, messages, their statistics and token sources, in SQLite.

The database is `chats.sqlite3` in the data folder. Answers are written while they stream:
the app appends tokens in small transactions (a few per second) and keeps the message marked
incomplete until its last event, so a crash or a kill keeps what was on the screen.

The schema is versioned in the `schema_version` table; MIGRATIONS lists the statements that
take a database from one version to the next. A database made by a newer Specula is refused
rather than guessed at.

Threading: a Store belongs to the thread that opened it (the GUI thread). It never imports Qt.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from app.core.attachments import Attachment
from app.core.sources import Source, load_sources
from app.core.tool_steps import ToolUse, load_tool_uses
from engine import AnswerStats, FinishReason
from engine.config import TokenSource
from engine.paths import data_dir

DB_NAME = "chats.sqlite3"

# MIGRATIONS[n] takes the database from version n to n + 1.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: late events cannot hit a new row
            title TEXT NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            deleted REAL  -- set while an undo is possible; such rows are purged on the next open
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL DEFAULT '',
            complete INTEGER NOT NULL DEFAULT 1,  -- 0 while an answer streams (or if it never finished)
            finish_reason TEXT,
            error TEXT,
            stats TEXT,       -- AnswerStats.to_dict(), JSON
            params TEXT,      -- models, sampling, speculation and the seed used, JSON
            comparison TEXT,  -- the result of "compare with plain decoding", JSON
            created REAL NOT NULL
        )""",
        "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
        """CREATE TABLE tokens (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            text TEXT NOT NULL,
            source TEXT NOT NULL,  -- 'target', 'draft', 'lookup' or 'history' (engine.config.TokenSource)
            round INTEGER NOT NULL,  -- the verification round that produced it, from 0
            PRIMARY KEY (message_id, idx)
        ) WITHOUT ROWID""",
    ],
    # A reasoning model's thinking, kept apart from the answer (content).
    ["ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''"],
    # Conversations pinned to the top of the list.
    ["ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"],
    # Files attached to a user message (app.core.attachments.Attachment.to_dict() each), JSON.
    ["ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]'"],
    [
        # What a conversation chose for itself (app.core.chat_settings.ChatSettings.to_dict()), JSON.
        "ALTER TABLE conversations ADD COLUMN settings TEXT NOT NULL DEFAULT '{}'",
        # Regenerated answers are kept as alternates: each names the first answer of its group,
        # and one answer of a group is shown (and sent to the model) at a time.
        "ALTER TABLE messages ADD COLUMN variant_of INTEGER",
        "ALTER TABLE messages ADD COLUMN shown INTEGER NOT NULL DEFAULT 1",
    ],
    # The passages of the user's documents an answer was given (app.core.sources.Source.to_dict() each), JSON.
    ["ALTER TABLE messages ADD COLUMN sources TEXT NOT NULL DEFAULT '[]'"],
    # The tools an answer called and what they answered (app.core.tool_steps.ToolUse.to_dict() each), JSON.
    ["ALTER TABLE messages ADD COLUMN tool_uses TEXT NOT NULL DEFAULT '[]'"],
]
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(Exception):
    """The chat database cannot be used; str() is a message for the user."""


class Role(str, Enum):
    """Who wrote a message. A str Enum: stored and exported as its value."""

    USER = "user"
    ASSISTANT = "assistant"

    def __str__(self) -> str:
        return self.value


@dataclass
class Token:
    text: str
    source: TokenSource
    round: int

    def __post_init__(self) -> None:
        self.source = token_source(self.source)


def token_source(value: str) -> TokenSource:
    """A stored source; one this version does not know (a newer app's) reads as the target's."""
    try:
        return TokenSource(value)
    except ValueError:
        return TokenSource.TARGET


def finish_reason(value: str | None) -> FinishReason | None:
    """A stored finish reason; None for none, or for one this version does not know."""
    try:
        return FinishReason(value) if value else None
    except ValueError:
        return None


@dataclass
class Conversation:
    id: int
    title: str
    created: float
    updated: float
    pinned: bool = False
    snippet: str = ""  # in search results: the matching text with a little around it
    settings: dict = field(default_factory=dict)  # its own choices (app.core.chat_settings.ChatSettings)


@dataclass
class Message:
    id: int
    conversation_id: int
    role: Role
    content: str = ""
    complete: bool = True
    finish_reason: FinishReason | None = None
    error: str | None = None
    stats: AnswerStats | None = None
    params: dict = field(default_factory=dict)
    comparison: dict | None = None
    created: float = 0.0
    tokens: list[Token] = field(default_factory=list)
    reasoning: str = ""  # the model's thinking before its answer (not part of content)
    attachments: list[Attachment] = field(default_factory=list)  # files quoted before content
    variant_of: int | None = None  # a regenerated answer: the first answer of its group
    variants: list[int] = field(default_factory=list)  # the ids of its group, oldest first ([] or [id]: alone)
    sources: list[Source] = field(default_factory=list)  # passages of the user's documents it was given
    tool_uses: list[ToolUse] = field(default_factory=list)  # the tools it called, in order (app.core.tool_steps)

    def __post_init__(self) -> None:
        self.role = Role(self.role)
        self.finish_reason = finish_reason(self.finish_reason)

    @property
    def group(self) -> int:
        return self.variant_of or self.id


class Store:
    def __init__(self, path: Path | str | None = None, *, db: sqlite3.Connection | None = None):
        """Open (or create) the database at path; with db, use that connection instead.

        db is how app.core.store_open keeps the app working when the file cannot be written: a copy
        in memory (nothing is saved, path says where the chats came from).
        """
        self.path = Path(path) if path else data_dir() / DB_NAME
        self.saved = db is None  # False: changes live in memory only
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are explicit (see _tx), nothing is left open.
            db = sqlite3.connect(self.path, isolation_level=None)
        self.db = db
        try:
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA foreign_keys = ON")
            if self.saved:
                # WAL: a writer never blocks readers, and a killed process loses at most the open transaction.
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
            self.migrate()
            # Also proves the file can be written. The window forgets these in the history index too.
            self.purged: list[int] = self.purge_deleted()
        except BaseException:
            self.db.close()  # a half-open database must not stay locked (or block moving it aside)
            raise

    def close(self) -> None:
        self.db.close()

    # -- schema -----------------------------------------------------------------------------

    def version(self) -> int:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = self.db.execute("SELECT version FROM schema_version").fetchone()
        return row[0] if row else 0

    def migrate(self) -> None:
        current = self.version()
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer version of Specula (schema {current}; this one knows "
                f"{SCHEMA_VERSION}). Update Specula, or move the file away to start with an empty history."
            )
        for version in range(current, SCHEMA_VERSION):
            with self._tx():
                for statement in MIGRATIONS[version]:
                    self.db.execute(statement)
                self.db.execute("DELETE FROM schema_version")
                self.db.execute("INSERT INTO schema_version (version) VALUES (?)", (version + 1,))

    def _tx(self):
        return _Transaction(self.db)

    # -- conversations ----------------------------------------------------------------------

    def conversations(self, search: str = "") -> list[Conversation]:
        """Pinned first, then newest first; with search, those whose title or any message contains it
        (any case), each with a snippet of the first message that matches."""
        term = search.strip()
        if not term:
            sql = f"SELECT {_CONVERSATION_COLUMNS}, '' FROM conversations WHERE deleted IS NULL"
            args: list = []
        else:
            pattern = "%" + _escape_like(term) + "%"
            first_match = (
                "SELECT m.content FROM messages m WHERE m.conversation_id = conversations.id"
                " AND m.shown = 1 AND m.content LIKE ? ESCAPE '\\' ORDER BY m.id LIMIT 1"
            )
            sql = (
                f"SELECT * FROM (SELECT {_CONVERSATION_COLUMNS}, ({first_match}) AS hit FROM conversations"
                " WHERE deleted IS NULL) WHERE title LIKE ? ESCAPE '\\' OR hit IS NOT NULL"
            )
            args = [pattern, pattern]
        sql += " ORDER BY pinned DESC, updated DESC, id DESC"
        return [_conversation(row, term) for row in self.db.execute(sql, args)]

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute(
            f"SELECT {_CONVERSATION_COLUMNS}, '' FROM conversations WHERE id = ? AND deleted IS NULL",
            (conversation_id,),
        ).fetchone()
        return _conversation(row, "") if row else None

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), conversation_id))

    def set_chat_settings(self, conversation_id: int, settings: dict) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET settings = ? WHERE id = ?", (_json(settings), conversation_id))

    def create_conversation(self, title: str, settings: dict | None = None) -> Conversation:
        now = time.time()
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO conversations (title, created, updated, settings) VALUES (?, ?, ?, ?)",
                (title, now, now, _json(settings or {})),
            )
        return Conversation(cur.lastrowid, title, now, now, settings=dict(settings or {}))

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        """Hide a conversation; undo_delete brings it back until purge_deleted (the next start)."""
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted = ? WHERE id = ?", (time.time(), conversation_id))

    def undo_delete(self, conversation_id: int) -> None:
        with self._tx():
            self.db.execute("UPDATE conversations SET deleted = NULL WHERE id = ?", (conversation_id,))

    def purge_deleted(self) -> list[int]:
        """Delete for good the conversations deleted before; their ids."""
        with self._tx():
            ids = [row[0] for row in self.db.execute("SELECT id FROM conversations WHERE deleted IS NOT NULL")]
            self.db.execute("DELETE FROM conversations WHERE deleted IS NOT NULL")
        return ids

    def _touch(self, conversation_id: int) -> None:
        self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

    # -- messages ---------------------------------------------------------------------------

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation as shown: of each group of alternate answers, the one chosen."""
        rows = self.db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? AND shown = 1 ORDER BY id", (conversation_id,)
        ).fetchall()
        messages = [_message(row) for row in rows]
        by_id = {m.id: m for m in messages}
        tokens = self.db.execute(
            "SELECT t.message_id, t.text, t.source, t.round FROM tokens t JOIN messages m ON m.id = t.message_id"
            " WHERE m.conversation_id = ? AND m.shown = 1 ORDER BY t.message_id, t.idx",
            (conversation_id,),
        )
        for message_id, text, source, round_ in tokens:
            by_id[message_id].tokens.append(Token(text, source, round_))
        groups: dict[int, list[int]] = {}
        for message_id, group in self.db.execute(
            "SELECT id, COALESCE(variant_of, id) FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        ):
            groups.setdefault(group, []).append(message_id)
        for message in messages:
            message.variants = groups.get(message.group, [message.id])
        return messages

    def message(self, message_id: int) -> Message | None:
        """Any message by id, shown or an alternate not chosen."""
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        message = _message(row)
        message.tokens = [
            Token(*r)
            for r in self.db.execute(
                "SELECT text, source, round FROM tokens WHERE message_id = ? ORDER BY idx", (message_id,)
            )
        ]
        message.variants = self._variants(message.group)
        return message

    def _variants(self, group: int) -> list[int]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM messages WHERE id = ? OR variant_of = ? ORDER BY id", (group, group)
            )
        ]

    def hide_message(self, message_id: int) -> None:
        """Keep an answer as an alternate not shown (before it is regenerated)."""
        with self._tx():
            self.db.execute("UPDATE messages SET shown = 0 WHERE id = ?", (message_id,))

    def show_variant(self, message_id: int) -> None:
        """Show this answer in place of the other alternates of its group."""
        row = self.db.execute("SELECT COALESCE(variant_of, id) FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return
        with self._tx():
            self.db.execute(
                "UPDATE messages SET shown = (id = ?) WHERE id = ? OR variant_of = ?", (message_id, row[0], row[0])
            )

    def add_message(
        self,
        conversation_id: int,
        role: Role,
        content: str = "",
        *,
        complete: bool = True,
        params: dict | None = None,
        attachments: Sequence[Attachment] = (),
        variant_of: int | None = None,
    ) -> Message:
        """variant_of: an answer written again: the first answer of the group it joins."""
        now = time.time()
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO messages (conversation_id, role, content, complete, params, attachments, variant_of,"
                " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    role,
                    content,
                    int(complete),
                    _json(params or {}),
                    _json([a.to_dict() for a in attachments]),
                    variant_of,
                    now,
                ),
            )
            self._touch(conversation_id)
        message = Message(
            cur.lastrowid,
            conversation_id,
            role,
            content,
            complete,
            params=params or {},
            created=now,
            attachments=list(attachments),
            variant_of=variant_of,
        )
        message.variants = self._variants(message.group)
        return message

    def append_tokens(
        self,
        message_id: int,
        first_index: int,
        tokens: Sequence[Token],
        content: str,
        stats: AnswerStats | None = None,
        reasoning: str = "",
    ) -> None:
        """Add streamed tokens (numbered from first_index) and the text so far, in one commit."""
        with self._tx():
            self.db.executemany(
                "INSERT OR REPLACE INTO tokens (message_id, idx, text, source, round) VALUES (?, ?, ?, ?, ?)",
                [(message_id, first_index + i, t.text, t.source, t.round) for i, t in enumerate(tokens)],
            )
            self.db.execute(
                "UPDATE messages SET content = ?, reasoning = ?, stats = COALESCE(?, stats) WHERE id = ?",
                (content, reasoning, _json(stats.to_dict()) if stats else None, message_id),
            )

    def finish_message(
        self,
        message_id: int,
        content: str,
        finish_reason: FinishReason,
        stats: AnswerStats | None,
        error: str | None = None,
        reasoning: str | None = None,
    ) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE messages SET content = ?, complete = 1, finish_reason = ?, error = ?,"
                " stats = COALESCE(?, stats), reasoning = COALESCE(?, reasoning) WHERE id = ?",
                (content, finish_reason, error, _json(stats.to_dict()) if stats else None, reasoning, message_id),
            )
            self._touch_message(message_id)

    def update_content(self, message_id: int, content: str) -> None:
        with self._tx():
            self.db.execute("UPDATE messages SET content = ? WHERE id = ?", (content, message_id))
            self._touch_message(message_id)

    def set_attachments(self, message_id: int, attachments: Sequence[Attachment]) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE messages SET attachments = ? WHERE id = ?",
                (_json([a.to_dict() for a in attachments]), message_id),
            )

    def set_sources(self, message_id: int, sources: Sequence[Source]) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE messages SET sources = ? WHERE id = ?", (_json([s.to_dict() for s in sources]), message_id)
            )

    def set_tool_uses(self, message_id: int, uses: Sequence[ToolUse]) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE messages SET tool_uses = ? WHERE id = ?", (_json([u.to_dict() for u in uses]), message_id)
            )

    def set_comparison(self, message_id: int, comparison: dict) -> None:
        with self._tx():
            self.db.execute("UPDATE messages SET comparison = ? WHERE id = ?", (_json(comparison), message_id))

    def delete_messages_after(self, message_id: int, *, inclusive: bool = False) -> None:
        """Delete the messages that follow message_id in its conversation (and it, if inclusive)."""
        row = self.db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return
        op = ">=" if inclusive else ">"
        with self._tx():
            self.db.execute(f"DELETE FROM messages WHERE conversation_id = ? AND id {op} ?", (row[0], message_id))

    def _touch_message(self, message_id: int) -> None:
        row = self.db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row:
            self._touch(row[0])


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:
            # SQLite may have rolled back already (it does on a full disk): a second ROLLBACK
            # would raise "no transaction is active" and hide the real error.
            self.db.execute("ROLLBACK")
        return False


def _message(row: sqlite3.Row) -> Message:
    stats = _load(row["stats"])
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        role=Role(row["role"]),
        content=row["content"],
        complete=bool(row["complete"]),
        finish_reason=finish_reason(row["finish_reason"]),
        error=row["error"],
        stats=AnswerStats.from_dict(stats) if stats else None,
        params=_load(row["params"]) or {},
        comparison=_load(row["comparison"]),
        created=row["created"],
        reasoning=row["reasoning"],
        attachments=[Attachment.from_dict(a) for a in _load(row["attachments"]) or [] if isinstance(a, dict)],
        variant_of=row["variant_of"],
        sources=load_sources(_load(row["sources"])),
        tool_uses=load_tool_uses(_load(row["tool_uses"])),
    )


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _load(text: str | None):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


_CONVERSATION_COLUMNS = "id, title, created, updated, pinned, settings"


def _conversation(row, term: str) -> Conversation:
    *columns, settings, hit = row
    conv = Conversation(*columns)
    conv.pinned = bool(conv.pinned)
    loaded = _load(settings)
    conv.settings = loaded if isinstance(loaded, dict) else {}
    conv.snippet = snippet(hit, term) if hit and term else ""
    return conv


def snippet(text: str, term: str, around: int = 40) -> str:
    """The first match of term in text (any case) with about `around` characters each side, on one line."""
    match = re.search(re.escape(term), text, re.IGNORECASE)
    if match is None:  # LIKE and Python disagree on case outside ASCII: show the start
        start, end = 0, 0
    else:
        start, end = match.start(), match.end()
    left, right = max(0, start - around), min(len(text), end + around)
    piece = " ".join(text[left:right].split())
    return ("…" if left else "") + piece + ("…" if right < len(text) else "")


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def title_from(text: str, limit: int = 48) -> str:
    """A conversation title from its first message: the first line, cut at a word."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "New chat")
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else line[:limit]).rstrip(" ,.;:") + "…"


def history(messages: Iterable[Message]) -> list[Message]:
    """The messages worth sending to the model: drop answers that are only an error."""
    return [m for m in messages if m.role == Role.USER or m.content.strip() or m.tool_uses]
