"""A passage as the model should read it: prose lines hard-wrapped by the file joined back into
running text.

Licences, man pages, plain-text manuals and PDF pages break their paragraphs every 70 or so
characters and often put two spaces after a full stop. A model quoting such a passage writes
running text, one space between words, so its quote differs from the passage's tokens at every line
break: prompt lookup and the documents drafter then match a dozen tokens at most before the next
break stops them (measured: a 48-token verbatim quote of GPL-3 drafted 1 token). Reflowed, the
quote is the passage token for token, and the model reads the text as the author meant it.

Only prose moves. Kept as they are: source code, fenced code blocks, list items (each starts its
own line; its wrapped continuation lines join it), table rows, headings and rules, and in Markdown
and reStructuredText the indented blocks (code, literal blocks). Plain text and PDF pages indent
prose too (licences indent their lettered clauses), so there indented lines are joined like others.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.documents.readers import CODE_SUFFIXES

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^\s*([-*+•]|\d{1,3}[.)]|\(?[a-zA-Z0-9]{1,4}\)|[a-z][.)])\s+\S")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
RULE = re.compile(r"^\s*([=\-_*~^`#+]\s*){3,}$")  # underlines of reStructuredText headings, --- rules
BLOCK_INDENT = re.compile(r"^(\t| {4})")
SPACES = re.compile(r"(?<=\S) {2,}(?=\S)")


CODE, MARKUP, TEXT = "code", "markup", "text"  # kinds of file: source code, Markdown or RST, anything else
# HTML, Word, OpenDocument, PowerPoint and Excel documents, e-books and notebooks are read as Markdown
MARKUP_SUFFIXES = frozenset(
    [".md", ".markdown", ".mdx", ".rst", ".html", ".htm", ".xhtml"]
    + [".docx", ".odt", ".epub", ".ipynb", ".pptx", ".xlsx"]
)


def for_prompt(path: str, text: str) -> str:
    """A passage of the file at path, reflowed as its kind of file allows."""
    suffix = Path(path).suffix.lower()
    return reflow(text, CODE if suffix in CODE_SUFFIXES else MARKUP if suffix in MARKUP_SUFFIXES else TEXT)


def reflow(text: str, kind: str = TEXT) -> str:
    """text with its hard-wrapped prose paragraphs joined into lines; kind: CODE (left as it is),
    MARKUP (indented blocks kept) or TEXT."""
    if kind == CODE:
        return text
    out: list[str] = []
    joinable = False  # the last line written is prose that the next prose line may continue
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            joinable = False
            continue
        if fenced or not line.strip() or _kept(line, kind):
            out.append(line)
            joinable = False
            continue
        starts_item = bool(LIST_ITEM.match(line))
        prose = SPACES.sub(" ", line.rstrip())
        if joinable and not starts_item and not RULE.match(line):
            out[-1] = f"{out[-1]} {prose.lstrip()}"
        else:
            out.append(prose)
        joinable = True
    return "\n".join(out)


def _kept(line: str, kind: str) -> bool:
    """A line that stands on its own: a heading, a rule, a table row, a line of an indented block."""
    if HEADING.match(line) or RULE.match(line) or line.lstrip().startswith("|"):
        return True
    return kind == MARKUP and bool(BLOCK_INDENT.match(line)) and not LIST_ITEM.match(line)
