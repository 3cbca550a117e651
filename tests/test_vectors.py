"""Vectors in the document index and hybrid retrieval (engine/documents/vectors.py, retrieval.py, the
terminal's docs commands) with a real embedding model (all-MiniLM-L6-v2 through llama.cpp,
tests/embedding_fixture.py): vectors filled in after keyword indexing, resumed after a cancel and a
kill -9, replaced when a file changes and gone with a deleted one; hybrid recall against BM25 on
questions about Debian's licence texts worded unlike them; keywords alone without vectors."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.documents import indexer, retrieval, vectors
from engine.documents.embeddings import Embedder
from engine.documents.library import Library
from tests import embedding_fixture

REPO = Path(__file__).resolve().parents[1]
LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files: real documents nobody here wrote

# Questions about the licence texts, worded unlike them, and a phrase of the passage that answers each
# (engine/data/docs_questions.json, shared with engine.bench_docs).
_QA = json.loads((REPO / "engine" / "data" / "docs_questions.json").read_text(encoding="utf-8"))
QA_LICENCES = tuple(_QA["licences"])
QUESTIONS = [(q["question"], q["phrase"]) for q in _QA["questions"]]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return embedding_fixture.minilm_gguf()


@pytest.fixture(scope="module")
def embedder(minilm):
    with Embedder(minilm) as e:
        yield e


@pytest.fixture
def library(tmp_path):
    lib = Library(tmp_path / "library")
    yield lib
    lib.close()


def notes(folder: Path, n_files: int = 6, sections: int = 8) -> Path:
    """Markdown notes: a passage per section, each about one animal."""
    animals = ["otters", "herons", "badgers", "foxes", "owls", "salmon", "beavers", "moles", "hares", "wrens"]
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(n_files):
        body = "\n\n".join(
            f"## Section {s}\n\nField note {f}.{s}: the {animals[(f + s) % len(animals)]} by the river were counted."
            for s in range(sections)
        )
        (folder / f"note{f}.md").write_text(f"# Note {f}\n\n{body}\n")
    return folder


def collection_of(library: Library, folder: Path, name: str = "docs") -> str:
    library.add_collection(name)
    library.add_sources(name, [folder])
    indexer.update(library, name)
    return name


def vector_rows(library: Library) -> int:
    return library.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]


# -- vectors in the index -------------------------------------------------------------------------


def test_vectors_fill_in_after_keyword_indexing_and_go_on_after_a_cancel(library, tmp_path, embedder):
    name = collection_of(library, notes(tmp_path / "notes"))
    total = library.counts(name)[1]
    assert total == 6 * 8 and vectors.missing(library, name, embedder.key) == total
    # Keyword search works at once; with no vectors yet, the embedder changes nothing.
    keyword = retrieval.search(library, [name], "badgers counted", 5)
    assert keyword and retrieval.search(library, [name], "badgers counted", 5, embedder) == keyword

    controls = indexer.Controls()
    seen: list[int] = []

    def cancel_after_two_batches(p: vectors.VectorProgress) -> None:
        seen.append(p.done)
        if p.done >= 16:
            controls.cancel()

    report = vectors.update(library, name, embedder, cancel_after_two_batches, controls, batch=8)
    assert report.cancelled and report.embedded == 16 and seen == [0, 8, 16]
    assert vectors.missing(library, name, embedder.key) == total - 16

    report = vectors.update(library, name, embedder, batch=8)
    assert (report.embedded, report.cancelled) == (total - 16, False)  # the rest, nothing twice
    assert vectors.counts(library, name, embedder.key) == vector_rows(library) == total
    assert vectors.update(library, name, embedder).embedded == 0


KILL_AFTER = """
import os, signal, sys
from pathlib import Path
from engine.documents import vectors
from engine.documents.embeddings import Embedder
from engine.documents.library import Library

library = Library(Path(sys.argv[1]))
stop_after = int(sys.argv[3])

def progress(p):
    if p.done == stop_after:
        os.kill(os.getpid(), signal.SIGKILL)  # as a crash would: no cleanup at all

vectors.update(library, "docs", Embedder(sys.argv[2]), progress, batch=8)
"""


def test_a_vector_pass_killed_mid_way_keeps_its_batches_and_resumes(tmp_path, minilm, embedder):
    root = tmp_path / "library"
    library = Library(root)
    name = collection_of(library, notes(tmp_path / "notes"))
    total = library.counts(name)[1]
    library.close()

    run = subprocess.run([sys.executable, "-c", KILL_AFTER, str(root), str(minilm), "24"], cwd=REPO, timeout=300)
    assert run.returncode == -9

    library = Library(root)
    try:
        assert vectors.counts(library, name, embedder.key) == 24  # three whole batches
        assert vectors.update(library, name, embedder, batch=8).embedded == total - 24
        assert vectors.counts(library, name, embedder.key) == total
    finally:
        library.close()


def test_a_changed_file_gets_new_vectors_and_a_deleted_one_takes_its_vectors_away(library, tmp_path, embedder):
    folder = notes(tmp_path / "notes", n_files=4, sections=3)
    name = collection_of(library, folder)
    vectors.update(library, name, embedder)
    total = library.counts(name)[1]
    assert vector_rows(library) == total == 4 * 3
    question = "Where did the striped horses feed?"  # no word in common with any passage
    assert "zebra" not in retrieval.search(library, [name], question, 3, embedder)[0].text  # caches the vectors

    (folder / "note2.md").write_text(
        "# Savanna\n\nA herd of zebras grazed on the plain near the waterhole.\n\n"
        "## Birds\n\nWeaver birds built nests in the acacia.\n"
    )
    indexer.update(library, name)
    assert vector_rows(library) == total - 3  # the old passages of note2 took their vectors with them
    assert vectors.missing(library, name, embedder.key) == 2
    assert vectors.update(library, name, embedder).embedded == 2
    hits = retrieval.search(library, [name], question, 3, embedder)
    assert "zebras" in hits[0].text and hits[0].path.endswith("note2.md")  # found by meaning: no shared word

    (folder / "note3.md").unlink()
    indexer.update(library, name)
    orphans = "SELECT COUNT(*) FROM vectors WHERE passage_id NOT IN (SELECT id FROM passages)"
    assert library.db.execute(orphans).fetchone()[0] == 0
    assert vector_rows(library) == library.counts(name)[1] == 12 - 3 + 2 - 3
    assert all(not h.path.endswith("note3.md") for h in retrieval.search(library, [name], "otters", 10, embedder))
    library.remove_collection(name)
    assert vector_rows(library) == 0


def test_the_embedding_model_is_kept_with_the_collections(library, tmp_path, minilm):
    assert library.embedding_model() is None
    library.add_collection("a")
    library.set_embedding_model(minilm)
    library.add_collection("b")
    library.add_sources("b", [tmp_path])
    assert library.embedding_model() == str(minilm.resolve())
    assert [c.name for c in library.collections()] == ["a", "b"]
    library.remove_collection("a")
    assert library.embedding_model() == str(minilm.resolve())
    library.set_embedding_model(None)
    assert library.embedding_model() is None and [c.name for c in library.collections()] == ["b"]


# -- hybrid retrieval -----------------------------------------------------------------------------


def test_reciprocal_rank_fusion_by_hand():
    fused = retrieval.fuse([[1, 2, 3], [3, 4]], k=60)
    assert [item for item, _ in fused] == [3, 1, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 63 + 1 / 61) and fused[1][1] == pytest.approx(1 / 61)
    assert retrieval.fuse([]) == []


def test_the_hybrid_combination_by_hand():
    keywords = [(1, 9.0), (2, 5.0), (3, 1.0)]  # BM25: 1 far ahead; 3 the last candidate
    meaning = [(4, 0.80), (2, 0.62), (1, 0.60)]  # cosines: 4 first, though keywords missed it
    combined = retrieval.combine([keywords, meaning], [0.5, 0.5])
    assert [item for item, _ in combined] == [1, 4, 2, 3]
    assert combined[0][1] == pytest.approx(0.5 * 1 + 0.5 * 0) and combined[1][1] == pytest.approx(0.5)
    assert combined[2][1] == pytest.approx(0.5 * 0.5 + 0.5 * 0.1) and combined[3][1] == 0
    # Reciprocal rank fusion would have put 4, first by meaning alone, last but one: ranks lose the margins.
    assert [item for item, _ in retrieval.fuse([[1, 2, 3], [4, 2, 1]])][-2:] == [4, 3]
    # A ranking whose scores are all equal counts every item in it as its best; an empty one adds nothing.
    assert retrieval.combine([[(7, 2.0), (8, 2.0)], []], [0.5, 0.5]) == [(7, 0.5), (8, 0.5)]


def recall(search, k: int) -> float:
    def flat(text: str) -> str:
        return " ".join(text.split())

    found = sum(any(flat(phrase) in flat(h.text) for h in search(question, k)) for question, phrase in QUESTIONS)
    return found / len(QUESTIONS)


def test_hybrid_search_finds_answers_worded_unlike_the_question_at_least_as_often_as_keywords(
    library, tmp_path, embedder
):
    folder = tmp_path / "licences"
    folder.mkdir()
    for licence in QA_LICENCES:
        shutil.copy(LICENSES / licence, folder / licence)
    name = collection_of(library, folder)
    assert vectors.update(library, name, embedder).embedded == library.counts(name)[1]

    def vector_only(question, k):
        near = vectors.nearest(library, [name], embedder.key, embedder.embed_query(question), k)
        found = retrieval._passages(library, [pid for pid, _ in near])
        return [found[pid] for pid, _ in near]

    table = {
        "BM25": lambda q, k: retrieval.search(library, [name], q, k),
        "vectors": vector_only,
        "hybrid": lambda q, k: retrieval.search(library, [name], q, k, embedder),
    }
    measured = {what: (recall(search, 3), recall(search, 5)) for what, search in table.items()}
    print("recall@3, @5:", measured)
    assert measured["hybrid"][0] >= measured["BM25"][0] and measured["hybrid"][1] > measured["BM25"][1]
    # A question found both ways keeps its passage first.
    first = retrieval.search(library, [name], "Who is the license steward of the Mozilla Public License?", 1, embedder)
    assert "Mozilla Foundation is the license steward" in first[0].text


def test_a_collection_too_large_for_float32_in_memory_is_scored_from_float16_alike(
    library, tmp_path, embedder, monkeypatch
):
    name = collection_of(library, notes(tmp_path / "notes", n_files=3, sections=4))
    vectors.update(library, name, embedder)
    query = embedder.embed_query("Where were the owls counted?")
    as_float32 = vectors.nearest(library, [name], embedder.key, query, 5)
    assert library.vector_cache[(name, embedder.key)].matrix.dtype == np.float32
    monkeypatch.setattr(vectors, "FLOAT32_BYTES", 0)
    monkeypatch.setattr(vectors, "SCORE_ROWS", 5)  # several blocks
    library.vector_cache.clear()
    as_float16 = vectors.nearest(library, [name], embedder.key, query, 5)
    assert library.vector_cache[(name, embedder.key)].matrix.dtype == np.float16
    assert [pid for pid, _ in as_float16] == [pid for pid, _ in as_float32]
    assert np.allclose([s for _, s in as_float16], [s for _, s in as_float32])


def test_without_an_embedding_model_or_its_vectors_search_is_keywords_alone(library, tmp_path, embedder):
    name = collection_of(library, notes(tmp_path / "notes", n_files=2, sections=2))
    keyword = retrieval.search(library, [name], "herons river", 3)
    assert keyword and retrieval.search(library, [name], "herons river", 3, embedder) == keyword
    assert retrieval.search(library, [name], "   ", 3, embedder) == []
    assert retrieval.search(library, [], "herons", 3, embedder) == []


# -- the terminal ---------------------------------------------------------------------------------


def test_the_terminal_chooses_an_embedding_model_and_indexes_searches_and_lists_with_vectors(
    tmp_path, minilm, smollm2_path, capsys
):
    from engine import cli

    def docs(*args: str) -> tuple[int, str, str]:
        code = cli.main(["docs", "--dir", str(tmp_path / "lib"), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    folder = notes(tmp_path / "notes", n_files=2, sections=3)
    assert docs("add", "notes", str(folder))[0] == 0
    code, _, err = docs("embedder", smollm2_path)
    assert code == 2 and "is a chat model (llama), not an embedding model" in err and "nomic-embed" in err
    code, out, _ = docs("embedder")
    assert code == 0 and out.startswith("No embedding model")
    code, out, _ = docs("embedder", str(minilm))
    assert code == 0 and "all-MiniLM-L6-v2 (bert, 384 dimensions)" in out

    code, out, err = docs("index", "notes")
    assert code == 0 and "vectors (all-MiniLM-L6-v2): 6 stored, 0 missing" in out and "vectors: 6/6 passages" in err
    code, out, _ = docs("search", "notes", "Where were the foxes?", "-n", "1")
    assert code == 0 and out.startswith("[1] note1.md") and "foxes" in out
    assert "notes: 2 files, 6 passages, 6 with vectors" in docs("list")[1]

    code, out, _ = docs("embedder", "--none")
    assert code == 0 and docs("embedder")[1].startswith("No embedding model")
    assert "with vectors" not in docs("list")[1]
    with sqlite3.connect(tmp_path / "lib" / "index.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 6  # kept for when it is chosen again


def test_a_passage_is_embedded_as_overlapping_windows_and_scored_by_its_best(library, tmp_path, embedder):
    words = [f"w{i}" for i in range(400)]
    parts = vectors.windows(" ".join(words), size=300, overlap=100)
    assert len(parts) > 3 and vectors.windows("one short line") == ["one short line"]
    assert all(len(p) <= 300 + 8 for p in parts)  # a window ends at the first word past its size
    assert " ".join(parts[0].split() + [w for p in parts[1:] for w in p.split()]).split()[-1] == words[-1]
    for before, after in zip(parts, parts[1:], strict=False):  # each starts inside the one before: no cut unseen
        assert after.split()[0] in before.split() and after.split()[0] != before.split()[0]

    folder = tmp_path / "long"
    folder.mkdir()
    filler = " ".join(f"The meeting minutes of week {i} list chairs, tables and the coffee rota." for i in range(12))
    (folder / "minutes.md").write_text(f"# Minutes\n\n{filler} The lighthouse keeper feeds three cats.\n")
    name = collection_of(library, folder)
    vectors.update(library, name, embedder)
    (blob,) = library.db.execute("SELECT vector FROM vectors").fetchone()
    assert len(blob) // (2 * embedder.dim) == len(
        vectors.windows(library.db.execute("SELECT text FROM passages").fetchone()[0])
    )
    question = embedder.embed_query("Who looks after the cats at the lighthouse?")
    ((pid, best),) = vectors.nearest(library, [name], embedder.key, question, 5)
    whole = embedder.embed_documents(
        [vectors.document_text("Minutes", filler + " The lighthouse keeper feeds three cats.")]
    )[0]
    assert best > float(whole @ question)  # the window that holds the sentence says it more clearly than the whole

    # An index written before windows holds one vector per passage: it is searched alike.
    library.db.execute("UPDATE vectors SET vector = ?", (whole.astype(np.float16).tobytes(),))
    library.db.commit()
    library.vector_cache.clear()  # vectors are only ever inserted and deleted: the cache cannot see this rewrite
    ((pid_old, score_old),) = vectors.nearest(library, [name], embedder.key, question, 5)
    assert pid_old == pid and score_old == pytest.approx(float(whole @ question), abs=2e-3)
