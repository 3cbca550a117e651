"""E-books (.epub): the chapters' XHTML in reading order, for the HTML reader to turn into Markdown.

An EPUB is a zip. META-INF/container.xml names the package document (.opf); its manifest lists the
book's files and its spine gives the reading order. Checked before a chapter is read, each with a
message for the user: not a zip or a damaged one, no package document, chapters under DRM (listed in
META-INF/encryption.xml: they read as noise; fonts listed there are only obfuscated, as DRM-free books
do), and chapters that would inflate past MAX_XHTML_BYTES (a zip bomb). The two small XML files are
parsed by the standard library (expat: no external entities, and expat >= 2.4 refuses entity bombs).
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree

MAX_XHTML_BYTES = 200 * 1024 * 1024  # the chapters of one book, unpacked: a long novel is ~2 MB
MAX_XML_BYTES = 10 * 1024 * 1024  # container.xml, encryption.xml and the package document, each
CHAPTER_TYPES = frozenset({"application/xhtml+xml", "text/html"})


class EpubError(Exception):
    """An e-book that cannot be read; str() says why."""


def epub_chapters(path: Path) -> list[str]:
    """The book's chapters as XHTML text, in reading order; EpubError says why they cannot be read."""
    try:
        with zipfile.ZipFile(path) as book:
            sizes = {i.filename: i.file_size for i in book.infolist()}
            package = _package_path(book, sizes)
            chapters = _spine(book, sizes, package)
            if not chapters:
                raise EpubError("an e-book without chapters (its spine lists no XHTML)")
            if protected := _encrypted(book, sizes) & set(chapters):
                raise EpubError(f"protected by DRM ({len(protected)} of {len(chapters)} chapters are encrypted)")
            unpacked = sum(sizes[name] for name in chapters)
            if unpacked > MAX_XHTML_BYTES:
                raise EpubError(
                    f"its chapters would unpack to {unpacked / 2**20:.0f} MB, more than {MAX_XHTML_BYTES // 2**20} MB"
                )
            return [book.read(name).decode("utf-8", errors="replace") for name in chapters]
    except zipfile.BadZipFile:
        raise EpubError("not an e-book, or a damaged one (not a readable zip file)") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as e:  # a damaged member, an odd method
        raise EpubError(f"a damaged e-book ({type(e).__name__}: {e})") from None


def _xml(book: zipfile.ZipFile, sizes: dict[str, int], name: str) -> ElementTree.Element:
    if sizes[name] > MAX_XML_BYTES:
        raise EpubError(f"{name} would unpack to {sizes[name] / 2**20:.0f} MB: not an e-book's")
    try:
        return ElementTree.fromstring(book.read(name))
    except ElementTree.ParseError as e:
        raise EpubError(f"a damaged e-book ({name}: {e})") from None


def _package_path(book: zipfile.ZipFile, sizes: dict[str, int]) -> str:
    if "META-INF/container.xml" not in sizes:
        raise EpubError("not an e-book (no META-INF/container.xml inside)")
    container = _xml(book, sizes, "META-INF/container.xml")
    for rootfile in container.iterfind(".//{*}rootfile"):
        name = rootfile.get("full-path", "")
        if name in sizes:
            return name
    raise EpubError("a damaged e-book (its package document is missing)")


def _spine(book: zipfile.ZipFile, sizes: dict[str, int], package: str) -> list[str]:
    """The spine's chapters as names in the zip (those missing from it left out)."""
    opf = _xml(book, sizes, package)
    folder = posixpath.dirname(package)
    manifest = {}
    for item in opf.iterfind(".//{*}item"):
        href, media = item.get("href"), item.get("media-type", "")
        if item.get("id") and href and media in CHAPTER_TYPES:
            manifest[item.get("id")] = posixpath.normpath(posixpath.join(folder, unquote(href.split("#")[0])))
    chapters = []
    for ref in opf.iterfind(".//{*}itemref"):
        name = manifest.get(ref.get("idref", ""))
        if name in sizes and name not in chapters:
            chapters.append(name)
    return chapters


def _encrypted(book: zipfile.ZipFile, sizes: dict[str, int]) -> set[str]:
    """The files META-INF/encryption.xml says are encrypted (paths in the zip)."""
    if "META-INF/encryption.xml" not in sizes:
        return set()
    encryption = _xml(book, sizes, "META-INF/encryption.xml")
    return {unquote(ref.get("URI", "")) for ref in encryption.iterfind(".//{*}CipherReference")}
