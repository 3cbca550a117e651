"""Files attached to a message: read as text (PDFs through pypdf; Word, OpenDocument and e-book files and
Jupyter notebooks, PowerPoint presentations and Excel workbooks as Markdown through the document library's
readers), refused with a reason, quoted into the prompt.

An attachment is stored with its message as its text, not as a path: the file may move or change,
and the conversation must read back (and be answered again) the same. Qt-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from engine.documents import readers

# A file bigger than this is refused before it is read (a PDF's text is far smaller than the file).
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_PDF_BYTES = 20 * 1024 * 1024  # PDFs and the zipped documents below: images make them big
# Read as Markdown, as a collection reads them
DOCUMENT_SUFFIXES = frozenset({".docx", ".odt", ".epub", ".ipynb", ".pptx", ".xlsx"})
KINDS = "text, code, PDF, Word, OpenDocument, PowerPoint, Excel, e-book (.epub) and notebook (.ipynb) files"
# The text kept from one file: ~50k tokens, more than a small model's whole context.
MAX_TEXT_CHARS = 200_000

# Fence languages for the code files people attach most; anything else is quoted as plain text.
LANGUAGES = {
    ".py": "python", ".js": "javascript", ".ts": "typescript", ".tsx": "tsx", ".jsx": "jsx", ".c": "c",
    ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".cc": "cpp", ".rs": "rust", ".go": "go", ".java": "java",
    ".kt": "kotlin", ".rb": "ruby", ".php": "php", ".cs": "csharp", ".swift": "swift", ".sh": "bash",
    ".sql": "sql", ".html": "html", ".css": "css", ".json": "json", ".yaml": "yaml", ".yml": "yaml",
    ".toml": "toml", ".xml": "xml", ".md": "markdown", ".csv": "csv", ".ini": "ini", ".lua": "lua",
}  # fmt: skip


class AttachmentError(Exception):
    """The file cannot be attached; str() says why, for the user."""


@dataclass(frozen=True)
class Attachment:
    name: str  # the file's name (no folder)
    text: str  # its content as text (a PDF's extracted text)
    kind: str = "text"  # "text", "pdf" or "document" (Word, OpenDocument, Office, e-book, notebook: Markdown)
    size: int = 0  # the file's size in bytes

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Attachment:
        return cls(str(data.get("name", "file")), str(data.get("text", "")), str(data.get("kind", "text")),
                   int(data.get("size", 0)))  # fmt: skip

    def quoted(self) -> str:
        """The file as the model sees it: its name, then its content in a fence that its own text cannot close."""
        fence = "```"
        while fence in self.text:
            fence += "`"
        language = LANGUAGES.get(Path(self.name).suffix.lower(), "") if self.kind == "text" else ""
        return f"File: {self.name}\n{fence}{language}\n{self.text.rstrip()}\n{fence}"

    def label(self) -> str:
        """ "notes.txt · 1.2 KB": for chips."""
        return f"{self.name} · {human_size(self.size)}"


def read(path: str | Path) -> Attachment:
    """The file at path as an Attachment; AttachmentError says why it cannot be attached."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise AttachmentError(f"{path.name} cannot be read: {e.strerror or e}.") from None
    if not path.is_file():
        raise AttachmentError(f"{path.name} is not a file.")
    suffix = path.suffix.lower()
    if suffix in readers.NOT_READ:  # .doc, .rtf, …: say what to save it as, not "a binary file"
        raise AttachmentError(f"{path.name} is {readers.NOT_READ[suffix]}.")
    kind = "pdf" if suffix == ".pdf" else "document" if suffix in DOCUMENT_SUFFIXES else "text"
    limit = MAX_FILE_BYTES if kind == "text" else MAX_PDF_BYTES
    if size > limit:
        raise AttachmentError(
            f"{path.name} is {human_size(size)}; files up to {human_size(limit)} can be attached. "
            "Attach a part of it, or paste the part you mean."
        )
    try:
        text = {"pdf": _pdf_text, "document": _document_text, "text": _plain_text}[kind](path)
    except OSError as e:
        raise AttachmentError(f"{path.name} cannot be read: {e.strerror or e}.") from None
    if len(text) > MAX_TEXT_CHARS:
        raise AttachmentError(
            f"{path.name} holds {len(text):,} characters of text; up to {MAX_TEXT_CHARS:,} can be attached "
            "(more than a small model's whole context)."
        )
    return Attachment(path.name, text, kind, size)


def _plain_text(path: Path) -> str:
    data = path.read_bytes()
    # A NUL byte never appears in text files (UTF-16 aside): images, archives, executables.
    if b"\0" in data[:8192]:
        raise AttachmentError(f"{path.name} is a binary file; {KINDS} can be attached.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AttachmentError(f"{path.name} is not UTF-8 text; {KINDS} can be attached.") from None


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader  # on first use: most chats attach nothing
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise AttachmentError(f"{path.name} is encrypted; save an unprotected copy to attach it.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except AttachmentError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError) as e:
        raise AttachmentError(f"{path.name} is not a readable PDF ({e}).") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise AttachmentError(f"{path.name} has no text to read (a scanned PDF needs OCR first).")
    return text


def _document_text(path: Path) -> str:
    try:
        document = readers.read(path)
    except readers.UnreadableFile as e:
        raise AttachmentError(str(e)) from None
    return "\n\n".join(page.text.strip() for page in document.pages if page.text.strip())


def prompt_text(content: str, attachments: list[Attachment]) -> str:
    """A user message as the model receives it: the attached files quoted first, then what was typed."""
    if not attachments:
        return content
    return "\n\n".join([a.quoted() for a in attachments] + ([content] if content.strip() else []))


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"
