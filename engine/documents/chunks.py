"""A document cut into passages that follow its own structure, each knowing where it is.

A heading starts a new passage and names the ones under it ("Install › Linux"); paragraphs are
packed together up to TARGET_CHARS; a fenced code block stays whole up to MAX_CHARS; a PDF's
passages never cross a page. A unit longer than MAX_CHARS is cut at line ends (at worst mid-line),
so no passage is ever larger than MAX_CHARS: about 400 tokens, a few of which fit any context.
Lines are counted from 1 in the file (in a PDF, on the page).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.documents.readers import Document, Format

TARGET_CHARS = 1000  # ~250 tokens: GPT4All's 512 characters cut answers in two; Jan's 512 tokens crowd a 4k context
MAX_CHARS = 1600

MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
RST_UNDERLINE = re.compile(r"^([=\-`:'\"~^_*+#<>])\1{2,}\s*$")


@dataclass(frozen=True)
class Passage:
    text: str
    heading: str  # the headings it sits under, outermost first, joined by " › " ("" for none)
    line_start: int
    line_end: int
    page: int | None = None


@dataclass
class _Unit:
    kind: str  # "heading", "text" or "code"
    lines: list[str]
    first: int  # line number of its first line
    level: int = 0  # a heading's


def passages(document: Document) -> list[Passage]:
    out: list[Passage] = []
    for page in document.pages:
        out.extend(_pack(_units(page.text, document.format), page.number))
    return out


def _units(text: str, fmt: Format) -> list[_Unit]:
    lines = text.splitlines()
    units: list[_Unit] = []
    para: _Unit | None = None
    rst_levels: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        number = i + 1
        if fmt is Format.MARKDOWN and FENCE.match(line):
            para = None
            fence = FENCE.match(line).group(1)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)), len(lines) - 1)
            units.append(_Unit("code", lines[i : end + 1], number))
            i = end + 1
            continue
        heading = _heading(lines, i, fmt, rst_levels)
        if heading is not None:
            para = None
            level, title, used = heading
            units.append(_Unit("heading", [title], number, level))
            i += used
            continue
        if not line.strip():
            para = None
        elif para is None:
            para = _Unit("code" if fmt is Format.CODE else "text", [line], number)
            units.append(para)
        else:
            para.lines.append(line)
        i += 1
    return units


def _heading(lines: list[str], i: int, fmt: Format, rst_levels: list[str]) -> tuple[int, str, int] | None:
    """(level, title, lines it takes) if a heading starts at line i."""
    line = lines[i]
    if fmt is Format.MARKDOWN:
        m = MD_HEADING.match(line)
        return (len(m.group(1)), m.group(2), 1) if m else None
    if fmt is Format.RST and line.strip() and i + 1 < len(lines):
        # A title underlined (and perhaps overlined) with one punctuation character, at least as long as it.
        under = RST_UNDERLINE.match(lines[i + 1])
        if under and len(lines[i + 1].rstrip()) >= len(line.rstrip()) and not RST_UNDERLINE.match(line):
            char = under.group(1)
            if char not in rst_levels:
                rst_levels.append(char)
            return rst_levels.index(char) + 1, line.strip(), 2
    return None


def _pack(units: list[_Unit], page: int | None) -> list[Passage]:
    out: list[Passage] = []
    path: list[tuple[int, str]] = []  # (level, title) of the headings in force
    held: list[tuple[str, int, int]] = []  # (text, first line, last line) waiting to become a passage

    def flush():
        if held:
            text = "\n\n".join(t for t, _, _ in held)
            out.append(Passage(text, " › ".join(t for _, t in path), held[0][1], held[-1][2], page))
            held.clear()

    for unit in units:
        if unit.kind == "heading":
            flush()
            path[:] = [(lv, t) for lv, t in path if lv < unit.level] + [(unit.level, unit.lines[0])]
            continue
        for text, first, last in _pieces(unit):
            if held and sum(len(t) for t, _, _ in held) + len(text) > TARGET_CHARS:
                flush()
            held.append((text, first, last))
            if len(text) >= TARGET_CHARS:
                flush()
    flush()
    return out


def _pieces(unit: _Unit) -> list[tuple[str, int, int]]:
    """The unit's text whole if it fits MAX_CHARS, else cut at line ends (a line too long, at MAX_CHARS)."""
    text = "\n".join(unit.lines).strip("\n")
    if len(text) <= MAX_CHARS:
        return [(text, unit.first, unit.first + len(unit.lines) - 1)] if text.strip() else []
    pieces, lines, first = [], [], unit.first
    for n, line in enumerate(unit.lines):
        number = unit.first + n
        if lines and (len(line) > MAX_CHARS or sum(len(x) + 1 for x in lines) + len(line) > MAX_CHARS):
            pieces.append(("\n".join(lines), first, number - 1))
            lines = []
        if len(line) > MAX_CHARS:
            pieces.extend((line[at : at + MAX_CHARS], number, number) for at in range(0, len(line), MAX_CHARS))
            continue
        if not lines:
            first = number
        lines.append(line)
    if lines:
        pieces.append(("\n".join(lines), first, unit.first + len(unit.lines) - 1))
    return [p for p in pieces if p[0].strip()]
