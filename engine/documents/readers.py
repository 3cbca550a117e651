"""A file as text, in pages, with its format: what the chunker needs to follow its structure.

Formats by extension: Markdown, reStructuredText, plain text, source code, HTML (its headings and
preformatted blocks kept as Markdown), PDF (pypdf, page by page), Word (.docx, as Markdown:
docx_reader.py), OpenDocument text (.odt, as Markdown: odt_reader.py), e-books (.epub: the chapters
in reading order, epub_reader.py, each through the HTML reader), Jupyter notebooks (.ipynb, as
Markdown: notebook_reader.py), PowerPoint presentations (.pptx, as Markdown, a slide a page:
pptx_reader.py) and Excel workbooks (.xlsx, a sheet a page of Markdown tables: xlsx_reader.py).
Documents in formats Specula does not read (old Word, Excel and PowerPoint files, rich text, iWork,
OpenDocument spreadsheets and presentations) are listed with what to save them as (NOT_READ), so a
folder of them does not look indexed. Anything else is not a document (`format_of` says None) and is
passed over, not reported: a folder of notes holds images too.
A file that is a document but cannot be read raises UnreadableFile with the reason, for the user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from html.parser import HTMLParser
from pathlib import Path

from engine.documents.docx_reader import DocxError, docx_markdown
from engine.documents.epub_reader import EpubError, epub_chapters
from engine.documents.notebook_reader import NotebookError, notebook_markdown
from engine.documents.odt_reader import OdtError, odt_markdown
from engine.documents.office_zip import OfficeFileError
from engine.documents.pptx_reader import pptx_slides
from engine.documents.xlsx_reader import xlsx_sheets
from engine.errors import EngineError

MAX_TEXT_BYTES = 20 * 1024 * 1024  # a text file bigger than this is a log or a dump, not a document
MAX_PDF_BYTES = 300 * 1024 * 1024
MAX_CHARS = 10_000_000  # of text from one file (a PDF's text is far smaller than the file)
PAGE_WORDS = {".pptx": "slide", ".xlsx": "sheet"}  # what a file's pages are called in a citation


class Format(Enum):
    MARKDOWN = "markdown"
    RST = "rst"
    TEXT = "text"
    CODE = "code"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"
    EPUB = "epub"
    ODT = "odt"
    NOTEBOOK = "ipynb"
    PPTX = "pptx"
    XLSX = "xlsx"


# Formats read as they are, so a passage's lines are the file's own (the others are converted to Markdown).
LINES_AS_IN_FILE = frozenset({Format.MARKDOWN, Format.RST, Format.TEXT, Format.CODE})

# Office files read a page of Markdown per slide or sheet.
PAGED = {Format.PPTX: pptx_slides, Format.XLSX: xlsx_sheets}

CODE_SUFFIXES = frozenset(
    [
        ".py",
        ".pyi",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".c",
        ".h",
        ".cpp",
        ".hpp",
        ".cc",
        ".cxx",
        ".rs",
        ".go",
        ".java",
        ".kt",
        ".rb",
        ".php",
        ".cs",
        ".swift",
        ".sh",
        ".bash",
        ".sql",
        ".css",
        ".scss",
        ".lua",
        ".r",
        ".jl",
        ".scala",
        ".m",
        ".mm",
        ".pl",
        ".ps1",
        ".toml",
        ".yaml",
        ".yml",
        ".ini",
        ".cfg",
        ".json",
        ".xml",
        ".proto",
        ".el",
        ".vim",
    ]
)
SUFFIXES = {
    **{s: Format.MARKDOWN for s in (".md", ".markdown", ".mdx")},
    ".rst": Format.RST,
    **{s: Format.TEXT for s in (".txt", ".text", ".log", ".csv", ".tsv", ".org", ".tex", ".adoc")},
    **{s: Format.HTML for s in (".html", ".htm", ".xhtml")},
    ".pdf": Format.PDF,
    ".docx": Format.DOCX,
    ".epub": Format.EPUB,
    ".odt": Format.ODT,
    ".ipynb": Format.NOTEBOOK,
    ".pptx": Format.PPTX,
    ".xlsx": Format.XLSX,
    **{s: Format.CODE for s in CODE_SUFFIXES},
}


# Documents people keep beside the formats above that Specula cannot read, and what to do about each.
_SAVE_AS = "save a copy as {} (Save As in {}) and Specula reads that"
NOT_READ = {
    ".doc": "an old Word document: " + _SAVE_AS.format(".docx", "Word or LibreOffice"),
    ".xls": "an old Excel workbook: " + _SAVE_AS.format(".xlsx", "Excel or LibreOffice"),
    ".ppt": "an old PowerPoint presentation: " + _SAVE_AS.format(".pptx", "PowerPoint or LibreOffice"),
    ".rtf": "rich text (RTF): " + _SAVE_AS.format(".docx, .odt or plain text", "any word processor"),
    ".ods": "an OpenDocument spreadsheet: " + _SAVE_AS.format(".xlsx", "LibreOffice"),
    ".odp": "an OpenDocument presentation: " + _SAVE_AS.format(".pptx", "LibreOffice"),
    ".pages": "a Pages document: export it as Word (.docx) or PDF and Specula reads that",
    ".numbers": "a Numbers spreadsheet: export it as Excel (.xlsx) and Specula reads that",
    ".key": "a Keynote presentation: export it as PowerPoint (.pptx) or PDF and Specula reads that",
}


def citation(path: str, page: int | None, line_start: int, line_end: int) -> str:
    """Where a passage is, for a citation: "guide.pdf, page 3", "talk.pptx, slide 2", "budget.xlsx, sheet 1",
    "notes.md, lines 10–24", or "report.docx" (see location)."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    where = location(name, page, line_start, line_end)
    return f"{name}, {where}" if where else name


def location(path: str, page: int | None, line_start: int, line_end: int) -> str:
    """Where in its file a passage is: "page 3", "slide 2", "lines 10–24", or "" for a file read through a
    conversion (Word, HTML, an e-book, a notebook): its lines are the conversion's, found nowhere in the file
    as the user opens it, and its headings say where instead."""
    suffix = Path(path.replace("\\", "/").rsplit("/", 1)[-1]).suffix.lower()
    if page is not None:
        return f"{PAGE_WORDS.get(suffix, 'page')} {page}"
    if SUFFIXES.get(suffix, Format.TEXT) not in LINES_AS_IN_FILE:  # no suffix, or a number: text
        return ""
    return f"line {line_start}" if line_start == line_end else f"lines {line_start}–{line_end}"


class UnreadableFile(EngineError):
    """A document that cannot be read; str() says why."""


@dataclass(frozen=True)
class Page:
    text: str
    number: int | None = None  # a PDF's page or a presentation's slide (from 1); None for files without pages


@dataclass(frozen=True)
class Document:
    format: Format
    pages: list[Page]


def format_of(path: Path) -> Format | None:
    """The file's format by its name, or None: not a document Specula reads. A name without a
    type ("README", "GPL-3", "LGPL-2.1") is text if its first bytes are."""
    suffix = path.suffix.lower()
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    if not suffix or suffix[1:].isdigit():
        return Format.TEXT if _looks_like_text(path) else None
    return None


def _looks_like_text(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if not head or b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start > len(head) - 4  # a character cut by the 4 KB boundary
    return True


def read(path: Path, size: int | None = None) -> Document:
    """The document at path; UnreadableFile says why it cannot be read."""
    fmt = format_of(path)
    if fmt is None:
        advice = NOT_READ.get(path.suffix.lower())
        raise UnreadableFile(f"{path.name}: {advice}." if advice else f"{path.name}: not a kind of file Specula reads.")
    size = path.stat().st_size if size is None else size
    zipped_or_images = (Format.PDF, Format.DOCX, Format.ODT, Format.EPUB, Format.NOTEBOOK, Format.PPTX, Format.XLSX)
    limit = MAX_PDF_BYTES if fmt in zipped_or_images else MAX_TEXT_BYTES  # images make these big
    if size > limit:
        raise UnreadableFile(
            f"{path.name}: {size / 2**20:.0f} MB, larger than the {limit // 2**20} MB read from one file."
        )
    if fmt is Format.PDF:
        pages = _pdf_pages(path)
    elif fmt is Format.DOCX:
        try:
            pages, fmt = [Page(docx_markdown(path))], Format.MARKDOWN
        except DocxError as e:
            raise UnreadableFile(f"{path.name}: {e}.") from None
    elif fmt is Format.ODT:
        try:
            pages, fmt = [Page(odt_markdown(path))], Format.MARKDOWN
        except OdtError as e:
            raise UnreadableFile(f"{path.name}: {e}.") from None
    elif fmt in PAGED:  # a presentation's slides, a workbook's sheets
        try:
            parts = PAGED[fmt](path)
        except OfficeFileError as e:
            raise UnreadableFile(f"{path.name}: {e}.") from None
        pages, fmt = [Page(text, number) for number, text in enumerate(parts, 1)], Format.MARKDOWN
    elif fmt is Format.NOTEBOOK:
        try:
            pages, fmt = [Page(notebook_markdown(path))], Format.MARKDOWN
        except NotebookError as e:
            raise UnreadableFile(f"{path.name}: {e}.") from None
    elif fmt is Format.EPUB:
        try:
            chapters = epub_chapters(path)
        except EpubError as e:
            raise UnreadableFile(f"{path.name}: {e}.") from None
        text = "\n".join(html_as_markdown(chapter) for chapter in chapters)
        if not text.strip():
            raise UnreadableFile(f"{path.name}: no text in it (an e-book of images).")
        pages, fmt = [Page(text)], Format.MARKDOWN
    else:
        text = _text(path)
        pages = [Page(html_as_markdown(text) if fmt is Format.HTML else text)]
        fmt = Format.MARKDOWN if fmt is Format.HTML else fmt
    if sum(len(p.text) for p in pages) > MAX_CHARS:
        raise UnreadableFile(f"{path.name}: more than {MAX_CHARS:,} characters of text.")
    return Document(fmt, pages)


def _text(path: Path) -> str:
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise UnreadableFile(f"{path.name}: damaged UTF-16 text.") from None
    # A NUL byte never appears in text (UTF-16 aside): an image, an archive or a program named like text.
    if b"\0" in data[:65536]:
        raise UnreadableFile(f"{path.name}: a binary file, not text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Older text files are often in the Windows code page; every byte decodes, so check it looks like text.
        text = data.decode("cp1252", errors="replace")
        if text.count("\ufffd") > len(text) // 100:
            raise UnreadableFile(f"{path.name}: neither UTF-8 nor Windows-1252 text.") from None
        return text


def _pdf_pages(path: Path) -> list[Page]:
    from pypdf import PdfReader  # on first use: most collections hold few PDFs
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):  # many "protected" PDFs only restrict printing: an empty password opens them
                    raise UnreadableFile(f"{path.name}: encrypted; save an unprotected copy to add it.")
            except NotImplementedError:
                raise UnreadableFile(f"{path.name}: encrypted with a method pypdf cannot open.") from None
        pages = [Page(page.extract_text() or "", i + 1) for i, page in enumerate(reader.pages)]
    except UnreadableFile:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as e:
        raise UnreadableFile(f"{path.name}: not a readable PDF ({type(e).__name__}: {e}).") from None
    if not any(p.text.strip() for p in pages):
        raise UnreadableFile(f"{path.name}: no text in it (a scanned PDF needs OCR first).")
    return pages


class _HtmlToMarkdown(HTMLParser):
    """Headings as '#' lines, <pre> as fenced code, block elements as paragraph breaks; scripts, styles dropped."""

    BLOCKS = frozenset(
        [
            "p",
            "div",
            "br",
            "li",
            "tr",
            "table",
            "ul",
            "ol",
            "section",
            "article",
            "header",
            "footer",
            "blockquote",
            "dd",
            "dt",
            "hr",
        ]
    )
    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "pre":
            self.pre += 1
            self.out.append("\n\n```\n")
        elif tag in self.BLOCKS:
            self.out.append("\n" if tag in ("br", "li", "tr") else "\n\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n")
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.out.append("\n```\n\n")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_as_markdown(text: str) -> str:
    parser = _HtmlToMarkdown()
    parser.feed(text)
    parser.close()
    lines = [line.rstrip() for line in "".join(parser.out).splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"
