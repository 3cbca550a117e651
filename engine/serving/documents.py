"""Answers from the user's document collections: a chat request's `"specula": {"collections": [...]}`.

The names are checked as the request arrives (from collections.json, without opening the index),
so an unknown one is answered 400 before anything waits in the queue. On the engine's
thread, where the model's tokenizer and context are, the last user message is grounded in the
passages that fit, by the terminal's rule (grounding.find_and_ground): the conversation with the
grounded message, plus the room kept for the answer, within the context. The index is read
through a Library opened on that thread (one per thread, as the library asks), kept open between
requests and closed when the server stops. With an embedding model chosen for the library (the
app's Documents window, `engine docs embedder`), the search is hybrid as in the app: the model is
loaded on that thread at the first grounded request and kept; one that cannot be loaded is logged
once and the search is by keywords. A reranking model chosen (`engine docs reranker`) reorders
what the search found, the same way. The passages found are drafted from (the documents drafter) as
in the app. The response carries the passages given as its sources, each marked where the answer
cites it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine import paths
from engine.config import ChatMessage
from engine.documents import chosen, grounding
from engine.documents.chosen import ChosenModel
from engine.documents.library import Library, read_collections
from engine.documents.retrieval import Hit
from engine.documents.whole_text import WholeText
from engine.tools import ToolChoice, ToolSpec

if TYPE_CHECKING:  # the name only: importing Engine loads llama.cpp
    from engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grounding:
    """What a grounded request's question was given, in order: sources[0] is passage [1]."""

    sources: tuple[Hit, ...]
    drafts: tuple[str, ...] = field(default=(), repr=False)  # the passages found, as the prompt gives them
    whole: WholeText | None = field(default=None, repr=False)  # the collections' whole text, to draft from

    def records(self, answer: str) -> list[dict]:
        """The sources as a response carries them, each `cited` when the answer cites its number."""
        cited = set(grounding.cited(answer, len(self.sources)))
        return [
            {
                "n": n,
                "collection": hit.collection,
                "path": hit.path,
                "page": hit.page,
                "line_start": hit.line_start,
                "line_end": hit.line_end,
                "heading": hit.heading,
                "text": hit.text,
                "cited": n in cited,
            }
            for n, hit in enumerate(self.sources, 1)
        ]


class Documents:
    """A server's document library: names checked on any thread, questions grounded on the engine's.

    root: the library's folder; None for engine.paths.documents_dir(), found when a request first
    names a collection (a server that is never asked for one creates no folder).
    """

    def __init__(self, root: Path | str | None = None):
        self._root = Path(root) if root else None
        self._libraries: dict[int, Library] = {}  # by thread: each opened on the thread that uses it
        self._models: dict[int, tuple[ChosenModel, ChosenModel]] = {}  # by thread: (embedding, reranking)
        self._lock = threading.Lock()  # close() from the stopping thread never meets a search

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = paths.documents_dir()
        return self._root

    def unknown(self, names: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """(the names that are not collections here, the collections there are)."""
        known = [c.name for c in read_collections(self.root)]  # collections.json: the index is not opened
        return [n for n in names if n not in known], known

    def ground(
        self,
        engine: Engine,
        messages: list[ChatMessage],
        names: tuple[str, ...],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        tool_choice: ToolChoice | None = None,
    ) -> tuple[list[ChatMessage], Grounding]:
        """On the engine's thread: the conversation with its last user message grounded in the
        passages of these collections that fit beside it and the tools it offers, and those passages.
        Raises LibraryError when a collection is no longer there."""
        at = max(i for i, m in enumerate(messages) if m.role == "user")  # parse_chat made sure of one
        before, question, after = messages[:at], messages[at], messages[at + 1 :]

        def fits(text: str) -> bool:
            return engine.fits([*before, ChatMessage("user", text), *after], max_tokens, tools, tool_choice)

        with self._lock:
            library = self._library()
            for name in names:
                library.collection(name)  # removed since the request came: LibraryError says which
            embedding, reranking = self._chosen()
            embedder = embedding.get(
                library,
                lambda e: log.warning("documents are searched by keywords: the embedding model cannot be used (%s)", e),
            )
            reranker = reranking.get(
                library,
                lambda e: log.warning("passages keep the search's order: the reranking model cannot be used (%s)", e),
            )
            grounded = grounding.find_and_ground(library, list(names), question.content, fits, embedder, reranker)
            if reranker is not None and reranker.failure is not None:
                log.warning("passages keep the search's order: reranking failed (%s)", reranker.failure)
        found = Grounding(tuple(grounded.sources), tuple(grounded.draft_texts), grounded.whole)
        return [*before, ChatMessage("user", grounded.message), *after], found

    def _chosen(self) -> tuple[ChosenModel, ChosenModel]:
        """This thread's embedding and reranking models, each loaded when a search first needs it."""
        thread = threading.get_ident()
        if thread not in self._models:
            self._models[thread] = (chosen.embedding_model(), chosen.reranking_model())
        return self._models[thread]

    def _library(self) -> Library:
        thread = threading.get_ident()
        library = self._libraries.get(thread)
        if library is None:  # a damaged index is set aside and rebuilt here, and logged by the library
            library = self._libraries[thread] = Library(self.root)
        return library

    def close(self) -> None:
        """Close the libraries opened (the server stops); a later request opens one again."""
        with self._lock:
            libraries, self._libraries = list(self._libraries.values()), {}
            models, self._models = [m for pair in self._models.values() for m in pair], {}
        for model in models:
            model.close()
        for library in libraries:
            library.close()
