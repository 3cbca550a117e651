"""The passages that best answer a question: keyword search over the index (SQLite FTS5, BM25),
fused with vector search when an embedding model is given (hybrid retrieval).

A question is not an FTS5 query: its words are quoted one by one (so punctuation, quotes and
operators in what the user typed are plain text) and joined with OR, and BM25 ranks passages that
hold more of the rarer words first, a word in a heading counting twice. The commonest English words
are left out: they match nearly every passage and only slow the search.

Words are Unicode word characters, stemmed (Porter) and without accents. Text without spaces
(Chinese, Japanese) would be one word per run there, found only by a run that matches whole: its
runs are searched by their three-character pieces too (cjk.py), and that ranking is fused with the
words' (as hybrid search fuses, below).

Hybrid: with an embedder, the question's vector finds the passages closest in meaning (vectors.py),
which catches answers worded differently from the question, and the two rankings are combined: each
ranking's scores (BM25, cosine) are scaled to 0..1 over its candidates (best 1, the last candidate
0) and a passage scores the mean of the two (0 from a ranking it is not in). This is the convex
combination of Bruch, Gai and Ingber ("An Analysis of Fusion Functions for Hybrid Retrieval", ACM
TOIS 2023), which beat reciprocal rank fusion in and out of domain; weighted equally it needs no
tuning. RRF keeps only ranks, so how far ahead a passage is gets lost: in a small collection nearly
every passage is a candidate in both rankings, and a passage first by meaning but missed by keywords
lost to passages middling in both (engine.bench_docs: recall@5 0.70 with RRF, 0.77 combined, and
0.71 against 0.83 on the held-out questions). Without an embedder, or where the collections have no
vectors for its model yet, search is BM25 alone; while vectors fill in, a passage without one can
still come from the keyword side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from engine.documents import cjk, readers, vectors
from engine.documents.library import GRAMS, Library

# Reciprocal rank fusion's constant (Cormack et al. 2009), for the words' and the CJK pieces' rankings,
# whose BM25 scores are not on one scale.
RRF_K = 60
# Candidates a reranker (rerank.py) reorders: the search's best; 10-15 scored alike on the questions tuned on.
RERANKED = 12
CANDIDATES = 50  # passages each ranking contributes to the combination
# The meaning's share of a hybrid score. Equal: a heavier weight on vectors scored higher on this
# project's questions, which are written to share few words with their answers, but would bury the
# passage that a name or an identifier in the question finds by keyword.
VECTOR_WEIGHT = 0.5

MAX_QUERY_WORDS = 64
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
    score: float  # higher is better: BM25 (keyword search) or the fused score (hybrid)

    def where(self) -> str:
        """ "guide.pdf, page 3" or "notes.md, lines 10–24": for a citation."""
        return readers.citation(self.path, self.page, self.line_start, self.line_end)


class PassageReranker(Protocol):
    """What search needs of a reranker (rerank.Reranker): the same hits in a better order."""

    def rerank(self, question: str, hits: list[Hit]) -> list[Hit]: ...


def fts_query(question: str) -> str:
    """The question as an FTS5 query: each word quoted, OR-ed; "" when no word is left. The last
    MAX_QUERY_WORDS distinct words only: a message with a long file attached is not a question of
    thousands of words (the question is typed after the file)."""
    words = [w for w in re.findall(r"\w+", question.lower()) if w not in STOPWORDS]
    if not words:
        words = re.findall(r"\w+", question.lower())
    return " OR ".join(f'"{w}"' for w in list(dict.fromkeys(reversed(words)))[:MAX_QUERY_WORDS][::-1])


def search(
    library: Library,
    collections: list[str],
    question: str,
    limit: int = 5,
    embedder: vectors.PassageEmbedder | None = None,
    reranker: PassageReranker | None = None,
) -> list[Hit]:
    """Up to limit passages of these collections, best first.

    embedder: an embeddings.Embedder (or anything with its key and embed_query) for hybrid search;
    None, or no vectors of its model in these collections: BM25 alone.
    reranker: a rerank.Reranker, which reorders the best candidates found (at least its RERANKED).
    """
    if not collections or not question.strip():
        return []
    if reranker is not None:
        found = search(library, collections, question, max(limit, RERANKED), embedder)
        return reranker.rerank(question, found)[:limit]
    if embedder is None:
        return [hit for _, hit in _keyword(library, collections, question, limit)]
    keyword = _keyword(library, collections, question, max(CANDIDATES, limit))
    near = vectors.nearest(library, collections, embedder.key, embedder.embed_query(question), max(CANDIDATES, limit))
    if not near:
        return [hit for _, hit in keyword[:limit]]
    fused = combine([[(pid, hit.score) for pid, hit in keyword], near], [1 - VECTOR_WEIGHT, VECTOR_WEIGHT])[:limit]
    found = dict(keyword)
    found.update(_passages(library, [pid for pid, _ in fused if pid not in found]))
    return [scored(found[pid], score) for pid, score in fused if pid in found]


def combine(rankings: list[list[tuple[int, float]]], weights: list[float]) -> list[tuple[int, float]]:
    """Convex combination: (id, sum of weight * score scaled to 0..1 within its ranking), best first.
    A ranking's best scales to 1 and its last to 0; a ranking whose scores are all equal scales them
    all to 1 (nothing in it is ahead of anything else)."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        if not ranking:
            continue
        values = [score for _, score in ranking]
        low, spread = min(values), max(values) - min(values)
        for item, score in ranking:
            scaled = (score - low) / spread if spread > 0 else 1.0
            scores[item] = scores.get(item, 0.0) + weight * scaled
    return sorted(scores.items(), key=lambda kv: -kv[1])


def fuse(rankings: list[list[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: (id, sum of 1 / (k + rank)) over the rankings (rank 1 first), best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


_COLUMNS = (
    "SELECT passages.id, files.collection, files.path, passages.text, passages.heading, passages.line_start,"
    " passages.line_end, passages.page"
)


def _keyword(library: Library, collections: list[str], question: str, limit: int) -> list[tuple[int, Hit]]:
    """(passage id, hit) by BM25, best first: by words, fused with the three-character pieces of
    the question's Chinese, Japanese or Korean runs when it has any."""
    words = _ranked(library, "passages_fts", fts_query(question), collections, limit)
    pieces = cjk.grams(question) if GRAMS else []
    if not pieces:
        return words
    grams = _ranked(library, "passages_grams", " OR ".join(f'"{g}"' for g in pieces), collections, limit)
    if not words or not grams:
        return words or grams
    found = dict(words) | dict(grams)
    return [(pid, scored(found[pid], score)) for pid, score in fuse([[p for p, _ in words], [p for p, _ in grams]])][
        :limit
    ]


def _ranked(library: Library, table: str, query: str, collections: list[str], limit: int) -> list[tuple[int, Hit]]:
    if not query:
        return []
    marks = ",".join("?" * len(collections))
    rows = library.db.execute(
        f"{_COLUMNS}, {table}.rank"
        f" FROM {table} JOIN passages ON passages.id = {table}.rowid JOIN files ON files.id = passages.file_id"
        f" WHERE {table} MATCH ? AND files.collection IN ({marks}) ORDER BY {table}.rank LIMIT ?",
        (query, *collections, limit),
    )
    return [(pid, Hit(c, p, t, h, ls, le, pg, -rank)) for pid, c, p, t, h, ls, le, pg, rank in rows]


def _passages(library: Library, ids: list[int]) -> dict[int, Hit]:
    found = {}
    for pid in ids:
        row = library.db.execute(
            f"{_COLUMNS} FROM passages JOIN files ON files.id = passages.file_id WHERE passages.id = ?", (pid,)
        ).fetchone()
        if row is not None:  # deleted since its vector was loaded
            found[pid] = Hit(*row[1:], 0.0)
    return found


def scored(hit: Hit, score: float) -> Hit:
    """The hit with another score."""
    return Hit(hit.collection, hit.path, hit.text, hit.heading, hit.line_start, hit.line_end, hit.page, score)
