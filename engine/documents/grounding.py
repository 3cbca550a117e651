"""A question answered from the user's documents: the passages found, numbered, put before it.

The model is asked to cite the passages it uses as [1], [2]. The passages are in the prompt, so
prompt lookup drafts whatever the answer quotes from them. As many passages go in as fit: the
caller says what fits (it knows the model's context and tokenizer; this package runs no model).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.documents.library import MAX_PASSAGES, Library
from engine.documents.reflow import for_prompt
from engine.documents.retrieval import Hit, search
from engine.documents.whole_text import WholeText

# Passages found per question, best first: as many of the first library.passages_per_question() (6 unless
# the user chose otherwise) as fit the context go in; all DRAFTED are drafted from, in the prompt or not.
DRAFTED = MAX_PASSAGES

INSTRUCTION = (
    "Passages from the user's documents that may help answer the question are numbered below. "
    "Use them where they are relevant, quote them where that helps, and cite each passage you use "
    "by its number in brackets, like [1]. If they do not hold the answer, say so."
)


@dataclass(frozen=True)
class Grounded:
    message: str  # what the model receives as the user's message
    sources: list[Hit]  # [1] is sources[0]
    drafts: list[Hit] = field(default_factory=list)  # the passages found, in the prompt or not: to draft from
    whole: WholeText | None = None  # all the text of the collections searched: to draft from too

    @property
    def draft_texts(self) -> list[str]:
        """The passages to draft from, as the prompt gives them (reflowed: see prompt_text)."""
        return [prompt_text(hit) for hit in self.drafts]


def ground(question: str, hits: list[Hit], fits: Callable[[str], bool]) -> Grounded:
    """The question with the best passages that fit before it (in the order found); none found or
    none fitting: the question alone."""
    chosen: list[Hit] = []
    for hit in hits:
        if fits(message_with(question, [*chosen, hit])):
            chosen.append(hit)
    return Grounded(message_with(question, chosen) if chosen else question, chosen)


def find_and_ground(
    library: Library,
    collections: list[str],
    question: str,
    fits: Callable[[str], bool],
    embedder=None,
    reranker=None,
) -> Grounded:
    """The question grounded in the best passages of these collections that fit, and for drafting
    the passages found and the collections' whole text (embedder: for hybrid search, reranker: to
    reorder what it found, as retrieval.search)."""
    hits = search(library, collections, question, DRAFTED, embedder=embedder, reranker=reranker)
    whole = WholeText(library.index_file, tuple(collections))
    return replace(ground(question, hits[: library.passages_per_question()], fits), drafts=hits, whole=whole)


def message_with(question: str, hits: list) -> str:
    """The question after these passages, numbered from 1 (anything with text, heading and where())."""
    blocks = [f"[{n}] {label(hit)}\n{prompt_text(hit).strip()}" for n, hit in enumerate(hits, 1)]
    return "\n\n".join([INSTRUCTION, *blocks, f"Question: {question}"])


def prompt_text(hit) -> str:
    """A passage's text as the model reads it: hard-wrapped prose joined into lines (reflow.py), so
    that a quote in running text is the passage token for token; source code as it is."""
    return for_prompt(hit.path, hit.text)


def label(hit: Hit) -> str:
    """ "guide.md, lines 3–10 · Install › Linux": where a passage is, for a person."""
    return f"{hit.where()} · {hit.heading}" if hit.heading else hit.where()


def cited(answer: str, n_sources: int) -> list[int]:
    """The source numbers the answer cites ([2], [1, 3], [1][2]), in order of first citation."""
    numbers: list[int] = []
    for group in re.findall(r"\[(\d+(?:\s*,\s*\d+)*)\]", answer):
        for n in (int(x) for x in group.split(",")):
            if 1 <= n <= n_sources and n not in numbers:
                numbers.append(n)
    return numbers
