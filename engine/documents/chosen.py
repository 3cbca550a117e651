"""A model the library names (the embedding model, the reranking model), loaded when first needed.

The app's engine thread and each of the server's threads keep one per kind: loaded at the first
search that wants it, closed and loaded again when the user chooses another, and a file that could
not be loaded is not tried again at every search (a new choice is), its reason told once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.documents.library import Library
from engine.errors import EngineError


class ChosenModel:
    """choose: the library's setting (a path or None); load: the model from a path (raises EngineError)."""

    def __init__(self, choose: Callable[[Library], str | None], load: Callable[[str], Any]):
        self._choose, self._load = choose, load
        self.path: str | None = None  # the choice the model (or the refusal) is for
        self.model: Any = None

    def get(self, library: Library, refused: Callable[[EngineError], None]) -> Any:
        """The chosen model, loaded; None when none is chosen or it cannot be loaded (refused is told
        why, once per choice)."""
        chosen = self._choose(library)
        if chosen == self.path:
            return self.model
        self.close()
        self.path = chosen
        if chosen is not None:
            try:
                self.model = self._load(chosen)
            except EngineError as e:
                refused(e)
        return self.model

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
        self.model = None
        self.path = None


def embedding_model() -> ChosenModel:
    """The library's embedding model, for hybrid search (embeddings.Embedder)."""

    def load(path: str):
        from engine.documents.embeddings import Embedder

        return Embedder(path)

    return ChosenModel(Library.embedding_model, load)


def reranking_model() -> ChosenModel:
    """The library's reranking model, to reorder what a search found (rerank.Reranker)."""

    def load(path: str):
        from engine.documents.rerank import Reranker

        return Reranker(path)

    return ChosenModel(Library.reranking_model, load)
