"""How likely a text-generation model finds one text after another: log-probabilities from one decode.

For reranking document passages (engine/documents/rerank.py): a passage that answers a question
makes the question likely, which a small chat model judges better than a small embedding model
matches meanings (Sachan et al., "Improving Passage Retrieval with Zero-Shot Question Generation",
2022). The model is loaded as a target is (engine/llama/runner.py: backends, GPU offload, the CPU
weight placement, clear load errors), with a context of its own, so the chat's models and their
caches are never touched. An embedding model or a reranker GGUF is refused before loading: it
scores nothing this way. One owner thread.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from engine.config import ModelSpec
from engine.errors import ModelLoadError, OperationCancelled
from engine.gguf.header import read_header
from engine.llama.runner import Cancelled, ModelRunner

N_CTX = 1024  # a passage (cut to fit) and a question
# Tokens of the continuation scored: a question's worth. Their logits come from one decode, which
# must stay within the context's batch (512), or llama.cpp writes past its buffers.
MAX_CONTINUATION = 256


def check(path: str | os.PathLike) -> None:
    """Raises ModelLoadError for an embedding model or a reranker GGUF (ModelFileError for a file that
    is not GGUF), saying what it is; reads the header only."""
    info = read_header(path)
    if info.is_embedding_model or info.is_reranker:
        what = "a reranker" if info.is_reranker else "an embedding model"
        raise ModelLoadError(
            f"{Path(path).name} is {what}: choose a text-generation model (a small chat model, such as the draft model)."
        )


class LikelihoodScorer:
    """A text-generation model that scores a continuation after a context."""

    def __init__(self, path: str | os.PathLike, n_threads: int | None = None):
        self.path = os.fspath(path)
        check(self.path)
        self.runner = ModelRunner(ModelSpec(self.path, n_ctx=N_CTX, n_threads=n_threads, mtp=False))
        self.name = Path(self.path).name

    def set_cancel(self, event) -> None:
        """A threading.Event that, once set, stops a scoring within one decode (OperationCancelled)."""
        self.runner.cancel_event = event

    def mean_logprob(self, context: str, continuation: str) -> float:
        """The mean log-probability (nats per token) of continuation's tokens after context's. A long
        context loses its start (keep what the continuation follows at its end), a long continuation
        is scored on its first MAX_CONTINUATION tokens; an empty continuation scores 0."""
        after = self.runner.tokenize(continuation, special=False)
        if after and after[0] == self.runner.bos_id:
            after = after[1:]
        after = after[:MAX_CONTINUATION]
        if not after:
            return 0.0
        before = self.runner.tokenize(context, special=False)[-(N_CTX - len(after)) :]
        if not before:
            before, after = after[:1], after[1:]  # nothing to predict the first token from
            if not after:
                return 0.0
        # Position i's logits predict token i + 1: the last len(after) + 1 rows but the last.
        try:
            logits = np.asarray(self.runner.eval(before + after, len(after) + 1)[:-1], dtype=np.float64)
        except Cancelled:
            raise OperationCancelled("Scoring was stopped.") from None
        top = logits.max(axis=1)
        log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        return float(np.mean(logits[np.arange(len(after)), after] - log_z))

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> LikelihoodScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
