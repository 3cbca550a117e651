"""The passages that best answer a question: keyword search over the index (SQLite FTS5, BM25).

A question is not an FTS5 query: its words are quoted one by one (so punctuation, quotes and
operators in what the user typed are plain text) and joined with OR, and BM25 ranks passages that
hold more of the rarer words first, a word in a heading counting twice. The commonest English words
are left out: they match nearly every passage and only slow the search.

Words are Unicode word characters, stemmed (Porter) and without accents; text without spaces
(Chinese, Japanese) is a single word per run, so it is found only by a run that matches whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.documents.library import Library

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "does",
        "do",
        "did",
        "can",
        "could",
        "should",
        "would",
    ]
)


@dataclass(frozen=True)
class Hit:
    """A passage found for a question, and where it is."""

    collection: str
    path: str
    text: str
    heading: str
    line_start: int
    line_end: int
    page: int | None
    score: float  # BM25, higher is better

    def where(self) -> str:
        """ "guide.pdf, page 3" or "notes.md, lines 10–24": for a citation."""
        name = self.path.rsplit("/", 1)[-1]
        if self.page is not None:
            return f"{name}, page {self.page}"
        if self.line_start == self.line_end:
            return f"{name}, line {self.line_start}"
        return f"{name}, lines {self.line_start}–{self.line_end}"


def fts_query(question: str) -> str:
    """The question as an FTS5 query: each word quoted, OR-ed; "" when no word is left."""
    words = [w for w in re.findall(r"\w+", question.lower()) if w not in STOPWORDS]
    if not words:
        words = re.findall(r"\w+", question.lower())
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


def search(library: Library, collections: list[str], question: str, limit: int = 5) -> list[Hit]:
    """Up to limit passages of these collections, best first."""
    query = fts_query(question)
    if not query or not collections:
        return []
    marks = ",".join("?" * len(collections))
    rows = library.db.execute(
        "SELECT files.collection, files.path, passages.text, passages.heading, passages.line_start,"
        " passages.line_end, passages.page, passages_fts.rank"
        " FROM passages_fts JOIN passages ON passages.id = passages_fts.rowid JOIN files ON files.id = passages.file_id"
        f" WHERE passages_fts MATCH ? AND files.collection IN ({marks}) ORDER BY passages_fts.rank LIMIT ?",
        (query, *collections, limit),
    )
    return [Hit(c, p, t, h, ls, le, pg, -rank) for c, p, t, h, ls, le, pg, rank in rows]
