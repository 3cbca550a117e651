"""Reranking what a document search found with a small text-generation model (engine/documents/rerank.py,
engine/llama/likelihood.py) through the real llama.cpp: the passage that answers a question worded unlike
it moves to the top; nothing is lost or added; an embedding model is refused; the terminal chooses the
model and its searches use it; the app's and server's lazily loaded choice (chosen.py)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from engine.documents import chosen, indexer, retrieval
from engine.documents.library import Library
from engine.documents.rerank import Reranker, passage_prompt
from engine.errors import DecodeError, EngineError, ModelFileError, ModelLoadError
from engine.llama.likelihood import LikelihoodScorer
from tests import embedding_fixture

REPO = Path(__file__).resolve().parents[1]
LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files: real documents nobody here wrote
_QA = json.loads((REPO / "engine" / "data" / "docs_questions.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reranker(qwen_paths):
    with Reranker(qwen_paths[1]) as r:  # the starter draft, as measured in engine.bench_docs
        yield r


@pytest.fixture
def held_out(tmp_path):
    """The held-out licences (LGPL-2.1, GPL-2, MPL-1.1) in a collection, keyword-indexed."""
    folder = tmp_path / "licences"
    folder.mkdir()
    for name in _QA["held_out"]["licences"]:
        shutil.copy(LICENSES / name, folder / name)
    library = Library(tmp_path / "library")
    library.add_collection("licences")
    library.add_sources("licences", [folder])
    indexer.update(library, "licences")
    yield library
    library.close()


def rank_of(hits, phrase: str) -> int | None:
    flat = " ".join(phrase.split())
    return next((i for i, h in enumerate(hits) if flat in " ".join(h.text.split())), None)


def test_the_passage_that_answers_a_question_worded_unlike_it_is_moved_to_the_top(held_out, reranker):
    question = "Can I switch my copy of the library over to the ordinary terms for programs?"
    phrase = "You may opt to apply the terms of the ordinary GNU General Public"
    found = retrieval.search(held_out, ["licences"], question, retrieval.RERANKED)
    before = rank_of(found, phrase)
    assert before is not None and before > 0, "keywords alone do not put it first (else nothing to show)"

    scores = reranker.scores(question, found)
    assert max(range(len(found)), key=scores.__getitem__) == before  # the model finds the question likeliest there
    # search() with the reranker: its best candidates reordered by both scores combined.
    reranked = retrieval.search(held_out, ["licences"], question, retrieval.RERANKED, reranker=reranker)
    assert rank_of(reranked, phrase) == 0
    assert sorted(h.text for h in reranked) == sorted(h.text for h in found)  # the same passages, none lost
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)


def test_only_the_best_candidates_are_reordered_and_the_rest_keep_their_place(held_out, reranker):
    question = "May I charge money for giving copies away?"
    found = retrieval.search(held_out, ["licences"], question, retrieval.RERANKED + 3)
    assert len(found) == retrieval.RERANKED + 3
    reranked = reranker.rerank(question, found)
    assert reranked[retrieval.RERANKED :] == found[retrieval.RERANKED :]
    assert reranker.rerank(question, found[:1]) == found[:1]  # nothing to reorder: no model call needed
    assert reranker.rerank("   ", found) == found


def test_a_stopped_reranking_keeps_the_search_order(held_out, reranker):
    found = retrieval.search(held_out, ["licences"], "May I charge money for giving copies away?", 8)
    stop = threading.Event()
    stop.set()  # the answer's Stop, pressed while its passages are being scored
    reranker.set_cancel(stop)
    try:
        assert reranker.rerank("May I charge money for giving copies away?", found) == found
    finally:
        reranker.set_cancel(None)


def test_a_reranking_that_fails_keeps_the_search_order_and_says_why(held_out, reranker, monkeypatch):
    question = "Can I switch my copy of the library over to the ordinary terms for programs?"
    found = retrieval.search(held_out, ["licences"], question, retrieval.RERANKED)
    scored_once = []

    def fails_after_one(context, continuation):  # a decode that fails mid-way (a GPU out of memory, say)
        if scored_once:
            raise DecodeError("llama_decode failed (code -3) at position 0.")
        scored_once.append(context)
        return -1.0

    monkeypatch.setattr(reranker.scorer, "mean_logprob", fails_after_one)
    assert reranker.rerank(question, found) == found
    assert "llama_decode failed" in str(reranker.failure)
    monkeypatch.undo()
    reranked = reranker.rerank(question, found)  # the next question is reranked again
    assert reranker.failure is None and reranked != found


def test_the_model_reads_the_heading_and_the_text_flattened_and_cut():
    hit = retrieval.Hit("c", "/x/notes.md", "line one\nline  two\n" + "word " * 600, "Intro › Setup", 1, 3, None, 1.0)
    prompt = passage_prompt(hit)
    assert prompt.startswith("Passage: Intro › Setup line one line two word")
    assert prompt.endswith("\nA question this passage answers:") and len(prompt) < 1300


def test_likelier_text_scores_higher_and_a_long_context_is_cut_to_fit(qwen_paths):
    with LikelihoodScorer(qwen_paths[1]) as scorer:
        fitting = scorer.mean_logprob("The capital of France is", " Paris.")
        unfitting = scorer.mean_logprob("The capital of France is", " a purple elephant.")
        assert fitting > unfitting
        long = scorer.mean_logprob("words " * 5000 + "The capital of France is", " Paris.")  # over the context
        assert long < 0 and scorer.mean_logprob("anything", "") == 0.0
        # A continuation longer than one decode's batch is scored on its start (in one piece it would crash).
        assert scorer.mean_logprob("Count:", " one two three" * 400) < 0


def test_an_embedding_model_or_a_file_that_is_no_model_is_refused_with_what_it_is(tmp_path):
    with pytest.raises(ModelLoadError, match="is an embedding model: choose a text-generation model"):
        Reranker(embedding_fixture.minilm_gguf())
    junk = tmp_path / "notes.gguf"
    junk.write_bytes(b"not a model at all" * 100)
    with pytest.raises(ModelFileError):
        Reranker(junk)


def test_the_terminal_chooses_a_reranking_model_and_its_searches_use_it(tmp_path, qwen_paths, capsys):
    from engine import cli

    def docs(*args: str) -> tuple[int, str, str]:
        code = cli.main(["docs", "--dir", str(tmp_path / "lib"), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    folder = tmp_path / "licences"
    folder.mkdir()
    shutil.copy(LICENSES / "LGPL-2.1", folder / "LGPL-2.1")
    assert docs("add", "lgpl", str(folder))[0] == 0 and docs("index", "lgpl")[0] == 0
    question = "Can I switch my copy of the library over to the ordinary terms for programs?"
    code, plain, _ = docs("search", "lgpl", question, "-n", "1")
    assert code == 0 and "opt to apply the terms of the ordinary" not in plain

    code, out, _ = docs("reranker")
    assert code == 0 and out.startswith("No reranking model")
    code, _, err = docs("reranker", str(embedding_fixture.minilm_gguf()))
    assert code == 2 and "is an embedding model" in err
    code, out, _ = docs("reranker", str(qwen_paths[1]))
    assert code == 0 and "Reranking model: qwen2.5-coder-0.5b" in out
    assert docs("reranker")[1].strip() == str(Path(qwen_paths[1]).resolve())

    code, reranked, _ = docs("search", "lgpl", question, "-n", "1")
    assert code == 0 and "opt to apply the terms of the ordinary" in reranked
    assert docs("reranker", "--none")[0] == 0 and docs("reranker")[1].startswith("No reranking model")


def test_a_chosen_model_is_loaded_once_again_after_a_new_choice_and_a_refused_one_is_not_retried(tmp_path):
    library = Library(tmp_path / "library")
    loads, refusals = [], []

    class Model:
        def __init__(self, path):
            if "bad" in path:
                raise EngineError(f"cannot load {path}")
            loads.append(path)
            self.closed = False

        def close(self):
            self.closed = True

    choice = chosen.ChosenModel(Library.reranking_model, Model)
    assert choice.get(library, refusals.append) is None and loads == []
    library.set_reranking_model(tmp_path / "a.gguf")
    first = choice.get(library, refusals.append)
    assert choice.get(library, refusals.append) is first and len(loads) == 1
    library.set_reranking_model(tmp_path / "bad.gguf")
    assert choice.get(library, refusals.append) is None and first.closed
    assert choice.get(library, refusals.append) is None and len(refusals) == 1  # said once, not retried
    library.set_reranking_model(None)
    assert choice.get(library, refusals.append) is None
    library.close()
