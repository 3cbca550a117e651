"""OpenDocument text (.odt: LibreOffice, OpenOffice, Google Docs' download) as Markdown: headings as `#`
lines by their outline level, list items as `- ` lines, tables as Markdown rows, in the body's order;
notes and comments left out (they would cut sentences in two).

An .odt is a zip whose content.xml holds the text. Checked before it is parsed: not a zip or a damaged
one, no content.xml, a password-protected document (META-INF/manifest.xml lists encryption data for
content.xml: it reads as noise), and content.xml inflating past MAX_XML_BYTES (a zip bomb). It is
parsed by the standard library (expat: no external entities, and expat >= 2.4 refuses entity bombs).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from xml.etree import ElementTree

from engine.documents.docx_reader import spaced

MAX_XML_BYTES = 200 * 1024 * 1024  # content.xml unpacked: a 1,000-page report is ~20 MB
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
# Inline elements whose text is not the sentence's own: footnotes, comments, tracked deletions.
LEFT_OUT = frozenset({TEXT + "note", OFFICE + "annotation", TEXT + "tracked-changes"})


class OdtError(Exception):
    """An OpenDocument text that cannot be read; str() says why."""


def odt_markdown(path: Path) -> str:
    """The document's text as Markdown; OdtError says why it cannot be read."""
    try:
        with zipfile.ZipFile(path) as z:
            sizes = {i.filename: i.file_size for i in z.infolist()}
            if "content.xml" not in sizes:
                raise OdtError("not an OpenDocument text (no content.xml inside)")
            if _encrypted(z, sizes):
                raise OdtError("password-protected: save a copy without a password to add it")
            if sizes["content.xml"] > MAX_XML_BYTES:
                raise OdtError(
                    f"its text would unpack to {sizes['content.xml'] / 2**20:.0f} MB, "
                    f"more than {MAX_XML_BYTES // 2**20} MB"
                )
            content = z.read("content.xml")
    except zipfile.BadZipFile:
        raise OdtError("not an OpenDocument text, or a damaged one (not a readable zip file)") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as e:
        raise OdtError(f"a damaged OpenDocument text ({type(e).__name__}: {e})") from None
    try:
        root = ElementTree.fromstring(content)
    except ElementTree.ParseError as e:
        raise OdtError(f"a damaged OpenDocument text (content.xml: {e})") from None
    body = root.find(f"{OFFICE}body/{OFFICE}text")
    lines: list[str] = []
    if body is not None:
        _blocks(body, lines)
    return "\n".join(spaced(lines)).strip() + "\n"


def _encrypted(z: zipfile.ZipFile, sizes: dict[str, int]) -> bool:
    if "META-INF/manifest.xml" not in sizes or sizes["META-INF/manifest.xml"] > MAX_XML_BYTES:
        return False
    try:
        manifest = ElementTree.fromstring(z.read("META-INF/manifest.xml"))
    except ElementTree.ParseError:
        return False  # the manifest is not needed to read the text
    for entry in manifest.iterfind(".//{*}file-entry"):
        if entry.get("{urn:oasis:names:tc:opendocument:xmlns:manifest:1.0}full-path") == "content.xml":
            return entry.find("{*}encryption-data") is not None
    return False


def _blocks(parent: ElementTree.Element, lines: list[str]) -> None:
    """The block elements under parent as Markdown lines, in order ("" ends a paragraph)."""
    for child in parent:
        tag = child.tag
        if tag == TEXT + "h":
            level = child.get(TEXT + "outline-level", "1")
            depth = min(int(level), 6) if level.isdigit() and int(level) > 0 else 1
            lines.append(f"{'#' * depth} {_inline(child)}")
        elif tag == TEXT + "p":
            lines.append(_inline(child))
        elif tag == TEXT + "list":
            _list(child, lines)
            lines.append("")
        elif tag == TABLE + "table":
            lines.extend(_table(child))
            lines.append("")
        elif tag not in LEFT_OUT:  # sections, indexes, frames: their paragraphs in place
            _blocks(child, lines)


def _list(element: ElementTree.Element, lines: list[str]) -> None:
    """Each item's paragraphs as `- ` lines (nested lists flattened: Markdown's items stay together)."""
    for item in element:
        for block in item:
            if block.tag in (TEXT + "p", TEXT + "h") and (text := _inline(block)):
                lines.append(f"- {text}")
            elif block.tag == TEXT + "list":
                _list(block, lines)


def _table(table: ElementTree.Element) -> list[str]:
    rows = []
    for row in table.iterfind(f".//{TABLE}table-row"):
        cells = [" ".join(_inline(p) for p in cell.iter(TEXT + "p")).replace("|", "\\|") for cell in row]
        rows.append("| " + " | ".join(cells) + " |")
        if len(rows) == 1:
            rows.append("|" + " --- |" * len(cells))
    return rows


def _inline(element: ElementTree.Element) -> str:
    """A paragraph's text: spans and links read through, spaces, tabs and line breaks as one space, notes left out."""
    parts: list[str] = []

    def walk(node: ElementTree.Element) -> None:
        parts.append(node.text or "")
        for child in node:
            if child.tag in (TEXT + "s", TEXT + "tab", TEXT + "line-break"):
                parts.append(" ")  # runs of spaces are one in running text
            elif child.tag not in LEFT_OUT:
                walk(child)
            parts.append(child.tail or "")

    walk(element)
    return " ".join("".join(parts).split())
