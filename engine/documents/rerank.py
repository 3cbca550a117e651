"""The passages a search found, put in a better order by a small text-generation model.

A passage that answers a question makes that question likely: each of the search's best RERANKED
passages is scored by the mean log-probability of the question after it under the model
("Passage: …\\nA question this passage answers: <question>"; Sachan et al., "Improving Passage
Retrieval with Zero-Shot Question Generation", 2022). That score and the search's own (BM25 or
hybrid) are each scaled to 0..1 over the candidates and averaged, as the hybrid search fuses its two
rankings (retrieval.combine); the passages after the candidates keep their order behind them.

Measured (engine.bench_docs --reranker, the starter draft model, Qwen2.5-Coder-0.5B Q4_K_M, over
hybrid search with all-MiniLM-L6-v2): recall@5 0.77 -> 0.90 on the questions it was chosen on; on
the held-out ones recall@3 0.67 -> 0.79 and @5 unchanged at 0.83 (README: Your documents). Its
cost is one prompt of a passage and the question per candidate: about a second a passage on 2 CPU
cores, so some 10 s a question there, a fraction of a second on a GPU. So it is the user's choice (`docs reranker FILE`), off until chosen.

Reranking only improves an order the search already gave: stopped, or failing (a decode error), it
leaves the passages in the search's order, and `failure` tells the caller why so it can say so.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from engine.documents.retrieval import RERANKED, Hit, combine, scored
from engine.errors import EngineError, OperationCancelled
from engine.llama import likelihood
from engine.llama.likelihood import LikelihoodScorer

PASSAGE_CHARS = 1200  # of a passage's text: a passage is packed to about 1,000 characters
MODEL_WEIGHT = 0.5  # the model's share of a passage's score; the search keeps the rest
PROMPT = "Passage: {passage}\nA question this passage answers:"


class Reranker:
    """A text-generation model (a GGUF path) that reorders passages for a question. One owner thread."""

    def __init__(self, path: str | os.PathLike, n_threads: int | None = None):
        self.scorer = LikelihoodScorer(path, n_threads)
        self.path = self.scorer.path
        self.name = self.scorer.name
        self.failure: EngineError | None = None  # why the last rerank() kept the search's order, if it failed
        self._progress: Callable[[int, int], None] | None = None

    def set_cancel(self, event) -> None:
        """A threading.Event (None: none) whose setting stops a reranking within about a passage's
        scoring; the hits then keep the search's order (the answer they were for is being stopped too)."""
        self.scorer.set_cancel(event)

    def set_progress(self, progress: Callable[[int, int], None] | None) -> None:
        """progress(passages scored, passages to score), called as each is scored (None: not told):
        seconds a question on a CPU, worth showing."""
        self._progress = progress

    def scores(self, question: str, hits: list[Hit]) -> list[float]:
        """Per passage, the mean log-probability of the question after it (higher: more likely)."""
        asked = " " + " ".join(question.split())
        scores = []
        for hit in hits:
            if self._progress is not None:
                self._progress(len(scores), len(hits))
            scores.append(self.scorer.mean_logprob(passage_prompt(hit), asked))
        return scores

    def rerank(self, question: str, hits: list[Hit]) -> list[Hit]:
        """The same hits, the first RERANKED reordered by the model's and the search's scores combined
        (a hit's score becomes that combination), the rest after them as they were."""
        self.failure = None
        head, rest = hits[:RERANKED], hits[RERANKED:]
        if len(head) < 2 or not question.strip():
            return list(hits)
        by_search = [(i, hit.score) for i, hit in enumerate(head)]
        try:
            by_model = list(enumerate(self.scores(question, head)))
        except OperationCancelled:
            return list(hits)
        except EngineError as e:  # the passages are still worth answering from, in the search's order
            self.failure = e
            return list(hits)
        order = combine([by_search, by_model], [1 - MODEL_WEIGHT, MODEL_WEIGHT])
        return [scored(head[i], score) for i, score in order] + rest

    def close(self) -> None:
        self.scorer.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check(path: str | os.PathLike) -> None:
    """Before choosing a file: refuses an embedding model or a reranker GGUF by its header, saying what
    it is (ModelFileError for a file that is not GGUF)."""
    likelihood.check(path)


def passage_prompt(hit: Hit) -> str:
    """What the model reads before the question: the passage's heading and text, whitespace flattened
    (a wrapped line is no signal here), cut to PASSAGE_CHARS."""
    text = " ".join(f"{hit.heading}\n{hit.text}".split())
    return PROMPT.format(passage=text[:PASSAGE_CHARS])
