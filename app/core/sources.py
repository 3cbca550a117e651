"""The passages of the user's documents an answer was given (engine.documents), kept with the answer.

Stored as JSON with the answer's message (Source.to_dict() each), shown in its Sources panel,
exported with it. Qt-free.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from engine.documents import grounding, readers


@dataclass
class Source:
    n: int  # the answer cites it as [n]
    collection: str
    path: str
    text: str
    heading: str = ""
    line_start: int = 0
    line_end: int = 0
    page: int | None = None
    cited: bool = False  # the answer cites it

    @classmethod
    def from_hit(cls, n: int, hit) -> Source:
        return cls(n, hit.collection, hit.path, hit.text, hit.heading, hit.line_start, hit.line_end, hit.page)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Source | None:
        """A stored source; None for one that cannot be read (a damaged row shows the others)."""
        try:
            page = data.get("page")
            return cls(
                int(data["n"]), str(data.get("collection", "")), str(data["path"]), str(data.get("text", "")),
                str(data.get("heading", "")), int(data.get("line_start", 0)), int(data.get("line_end", 0)),
                int(page) if isinstance(page, int) else None, bool(data.get("cited", False)),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def where(self) -> str:
        """ "report.pdf, page 3" or "notes.md, lines 10–24"."""
        return readers.citation(self.path, self.page, self.line_start, self.line_end)


def mark_cited(sources: list[Source], answer: str) -> list[Source]:
    """The sources with `cited` set from the answer's [n] citations."""
    cited = set(grounding.cited(answer, len(sources)))
    for source in sources:
        source.cited = source.n in cited
    return sources


def load_sources(data) -> list[Source]:
    """Stored sources (JSON), those that can be read."""
    return (
        [s for s in (Source.from_dict(d) for d in data if isinstance(d, dict)) if s] if isinstance(data, list) else []
    )
