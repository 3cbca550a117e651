"""Word documents (.docx) as Markdown text, through python-docx: the Title and headings become `#`
lines, Heading 1 as `##` (so passages follow the document's own sections), list paragraphs `- `
items, tables Markdown rows, in the order the body has them.

A .docx is a zip of XML parts. Before python-docx parses anything, the zip is checked: a file that
is not a zip (a password-protected document is an OLE file, an old .doc renamed), a damaged one, or
a body part that would inflate beyond MAX_XML_BYTES (a zip bomb) is refused with a message.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

MAX_XML_BYTES = 200 * 1024 * 1024  # the uncompressed XML of one .docx: a 1,000-page report is ~20 MB
HEADING_STYLE = re.compile(r"^(?:Heading|Überschrift|Titre|Título|Titolo)\s*(\d)$", re.IGNORECASE)
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted .docx, or a .doc from Word 97–2003


class DocxError(Exception):
    """A .docx that cannot be read; str() says why."""


def docx_markdown(path: Path) -> str:
    """The document's text as Markdown; DocxError says why it cannot be read."""
    _check_zip(path)
    import docx  # on first use: most collections hold few Word files
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if isinstance(block, Paragraph):
                lines.append(_paragraph(block))
            elif isinstance(block, Table):
                lines.extend(_table(block))
                lines.append("")
    except DocxError:
        raise
    except Exception as e:  # python-docx and lxml raise many kinds on a damaged part
        raise DocxError(f"a damaged Word document ({type(e).__name__}: {e})") from None
    return "\n".join(spaced(lines)).strip() + "\n"


def _check_zip(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(8)
    if head == OLE_MAGIC:
        raise DocxError("password-protected, or an old Word (.doc) file: open it in Word and save it as .docx")
    try:
        with zipfile.ZipFile(path) as z:
            names = {i.filename: i for i in z.infolist()}
            if "word/document.xml" not in names:
                raise DocxError("not a Word document (no word/document.xml inside)")
            xml = sum(i.file_size for name, i in names.items() if name.endswith(".xml"))
    except zipfile.BadZipFile:
        raise DocxError("not a Word document, or a damaged one (not a readable zip file)") from None
    if xml > MAX_XML_BYTES:
        raise DocxError(f"its text would unpack to {xml / 2**20:.0f} MB, more than {MAX_XML_BYTES // 2**20} MB")


def _paragraph(paragraph) -> str:
    text = paragraph.text.strip()
    style = paragraph.style.name if paragraph.style is not None else ""
    if not text:
        return ""
    heading = HEADING_STYLE.match(style or "")
    if heading:
        return f"{'#' * min(int(heading.group(1)) + 1, 6)} {text}"  # under the Title's "#"
    if style == "Title":
        return f"# {text}"
    if style.startswith("List"):
        return f"- {text}"
    return text


def _table(table) -> list[str]:
    rows = []
    for i, row in enumerate(table.rows):
        cells = [" ".join(cell.text.split()).replace("|", "\\|") for cell in row.cells]
        rows.append("| " + " | ".join(cells) + " |")
        if i == 0:
            rows.append("|" + " --- |" * len(cells))
    return rows


def spaced(lines: list[str]) -> list[str]:
    """A blank line between paragraphs (Markdown's paragraph break); list items (nested ones too) and
    table rows kept together."""
    out: list[str] = []
    for line in lines:
        if not line:
            if out and out[-1]:
                out.append("")
            continue
        together = out and out[-1] and (line.lstrip().startswith("- ") and out[-1].lstrip().startswith("- "))
        if out and out[-1] and not together and not (line.startswith("|") and out[-1].startswith("|")):
            out.append("")
        out.append(line)
    return out
