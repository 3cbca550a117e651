"""PowerPoint presentations (.pptx) as Markdown, a slide at a time: the slide's title as a `#` line, the
points of its body placeholders as `- ` items (indented by level), other text boxes as paragraphs,
tables as Markdown rows, shapes inside groups in order, and the speaker notes after the slide's own
text (they often say what the slide only hints at). Slides come in the deck's order, hidden ones too
(they are the author's text all the same). Each slide is a page of its own, so a passage never spans
two slides and is cited as "deck.pptx, slide 3".

A .pptx is a zip of PresentationML parts (ECMA-376), read with the standard library as odt_reader.py
reads OpenDocument: python-pptx would parse it as well, but it imports Pillow at load (some 20 MB in the
desktop bundle) to read text that needs none. Checked before anything is parsed (office_zip.py: a
password-protected file, an old .ppt, a damaged zip, a zip bomb); expat resolves no external entities
and refuses entity bombs.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from xml.etree import ElementTree

from engine.documents.docx_reader import spaced
from engine.documents.office_zip import OfficeFileError, checked_zip, relations

P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
NOTES_TYPE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/notesSlide"
TITLES = frozenset({"title", "ctrTitle"})
NOT_TEXT = frozenset({"sldNum", "dt", "ftr", "hdr", "sldImg"})  # placeholders the layout fills in


def pptx_slides(path: Path) -> list[str]:
    """Each slide's text as Markdown, in the deck's order ("" for a slide without text); OfficeFileError
    says why the file cannot be read."""
    try:
        with checked_zip(path, "ppt/presentation.xml", "PowerPoint presentation", "PowerPoint", ".ppt") as z:
            return [_slide(z, part) for part in _slide_parts(z)]
    except (zipfile.BadZipFile, zlib.error, EOFError, ElementTree.ParseError, KeyError) as e:
        raise OfficeFileError(f"a damaged PowerPoint presentation ({type(e).__name__}: {e})") from None


def _slide_parts(z: zipfile.ZipFile) -> list[str]:
    """The slides' part names in the order the presentation lists them."""
    deck = ElementTree.fromstring(z.read("ppt/presentation.xml"))
    targets = relations(z, "ppt/presentation.xml")
    listed = deck.find(f"{P}sldIdLst")
    return [targets[s.get(f"{R}id")][0] for s in (listed if listed is not None else ())]


def _slide(z: zipfile.ZipFile, part: str) -> str:
    tree = ElementTree.fromstring(z.read(part)).find(f"{P}cSld/{P}spTree")
    titles, lines = [], []
    for shape in _shapes(tree):
        kind = _placeholder(shape)
        if kind in TITLES:
            titles.append(" ".join(_paragraph_text(p) for p in shape.iter(f"{A}p")).strip())
        elif kind not in NOT_TEXT:
            lines.extend(_text(shape, bulleted=kind is not None))
    heading = [f"# {' '.join(t.split())}" for t in titles if t.strip()][:1]
    notes = [target for target, kind in relations(z, part).values() if kind == NOTES_TYPE]
    for target in notes[:1]:
        body = ElementTree.fromstring(z.read(target)).find(f"{P}cSld/{P}spTree")
        said = " ".join(
            " ".join(_paragraph_text(p) for p in shape.iter(f"{A}p"))
            for shape in _shapes(body)
            if _placeholder(shape) == "body"
        )
        if said.strip():
            lines.extend(["", "Notes: " + " ".join(said.split())])
    return "\n".join(spaced(heading + lines)).strip()


def _shapes(tree):
    """The shapes with text of a shape tree, in order, groups opened: text shapes and tables."""
    for child in tree if tree is not None else ():
        if child.tag == f"{P}grpSp":
            yield from _shapes(child)
        elif child.tag in (f"{P}sp", f"{P}graphicFrame"):
            yield child


def _placeholder(shape) -> str | None:
    """The placeholder's type ("title", "body", ...; a placeholder without one is the body), None if not one."""
    for props in (f"{P}nvSpPr", f"{P}nvGraphicFramePr"):
        ph = shape.find(f"{props}/{P}nvPr/{P}ph")
        if ph is not None:
            return ph.get("type", "body")
    return None


def _text(shape, bulleted: bool) -> list[str]:
    table = shape.find(f".//{A}tbl")
    if table is not None:
        return [*_table(table), ""]
    body = shape.find(f"{P}txBody")
    lines = []
    for paragraph in body.findall(f"{A}p") if body is not None else ():
        text = " ".join(_paragraph_text(paragraph).split())
        if not text:
            lines.append("")
        elif bulleted:
            props = paragraph.find(f"{A}pPr")
            level = int(props.get("lvl", "0")) if props is not None and props.get("lvl", "0").isdigit() else 0
            lines.append("  " * min(level, 8) + "- " + text)
        else:
            lines.append(text)
    return [*lines, ""]


def _paragraph_text(paragraph) -> str:
    """A paragraph's runs, fields and line breaks, as text."""
    parts = []
    for child in paragraph:
        if child.tag in (f"{A}r", f"{A}fld"):
            parts.append("".join(t.text or "" for t in child.iter(f"{A}t")))
        elif child.tag == f"{A}br":
            parts.append(" ")
    return "".join(parts)


def _table(table) -> list[str]:
    rows = []
    for i, row in enumerate(table.findall(f"{A}tr")):
        cells = [
            " ".join(" ".join(_paragraph_text(p) for p in cell.iter(f"{A}p")).split()).replace("|", "\\|")
            for cell in row.findall(f"{A}tc")
        ]
        rows.append("| " + " | ".join(cells) + " |")
        if i == 0:
            rows.append("|" + " --- |" * len(cells))
    return rows
