"""E-books in the library (engine/documents/epub_reader.py): EPUB 3 files laid out as the format's
specification has them (a stored mimetype first, container.xml, a package document whose spine orders
the chapters), read as Markdown in reading order, indexed, searched and cited; a book under DRM, a cut
download, a zip that is no e-book and a zip bomb refused with a reason while the rest is indexed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from engine.documents import grounding, readers, retrieval
from engine.documents.epub_reader import MAX_XHTML_BYTES
from tests.indexed_folder import indexed_folder

CONTAINER = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""

CHAPTERS = {  # file name in the book -> (title, paragraphs); listed in the manifest in this order
    "text/chapter 2.xhtml": ("The Lighthouse", ["Mara kept the lamp lit through the winter storms of 1911."]),
    "text/chapter1.xhtml": ("Arrival", ["The ferry left Mara on the island with a trunk and a letter."]),
}
SPINE = ["text/chapter1.xhtml", "text/chapter 2.xhtml"]  # the reading order differs from the manifest's


def chapter(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Running title</title>'
        "<style>p { margin: 0 }</style></head>"
        f"<body><section><h1>{title}</h1>{body}</section></body></html>"
    )


def make_book(path: Path, encrypted: list[str] = (), inflate: int = 0) -> Path:
    """An EPUB 3 as the specification lays it out; `encrypted`: files named in META-INF/encryption.xml;
    `inflate`: bytes of blank space the last chapter unpacks to beyond its text (a zip bomb)."""
    items = "".join(
        f'<item id="c{i}" href="{name.replace(" ", "%20")}" media-type="application/xhtml+xml"/>'
        for i, name in enumerate(CHAPTERS)
    )
    ids = {name: f"c{i}" for i, name in enumerate(CHAPTERS)}
    spine = "".join(f'<itemref idref="{ids[name]}"/>' for name in SPINE)
    opf = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Keeper</dc:title></metadata>'
        f'<manifest>{items}<item id="font" href="fonts/serif.otf" media-type="font/otf"/></manifest>'
        f"<spine>{spine}</spine></package>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", opf)
        for name, (title, paragraphs) in CHAPTERS.items():
            with z.open(f"OEBPS/{name}", "w", force_zip64=True) as f:
                f.write(chapter(title, paragraphs).encode())
                for _ in range(inflate // (1 << 20)):
                    f.write(b" " * (1 << 20))
        z.writestr("OEBPS/fonts/serif.otf", b"\0" * 64)
        if encrypted:
            refs = "".join(
                '<enc:EncryptedData xmlns:enc="http://www.w3.org/2001/04/xmlenc#">'
                f'<enc:CipherData><enc:CipherReference URI="{name}"/></enc:CipherData></enc:EncryptedData>'
                for name in encrypted
            )
            z.writestr(
                "META-INF/encryption.xml",
                f'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container">{refs}</encryption>',
            )
    return path


def test_an_e_book_reads_as_markdown_in_reading_order(tmp_path):
    doc = readers.read(make_book(tmp_path / "keeper.epub"))
    assert doc.format is readers.Format.MARKDOWN and len(doc.pages) == 1
    text = doc.pages[0].text
    assert text.index("# Arrival") < text.index("The ferry left") < text.index("# The Lighthouse")
    assert "Mara kept the lamp lit" in text and "Running title" not in text and "margin" not in text
    # An obfuscated font (what DRM-free books do) is not DRM: the book still reads.
    obfuscated = readers.read(make_book(tmp_path / "fonts.epub", encrypted=["OEBPS/fonts/serif.otf"]))
    assert obfuscated.pages[0].text == text


def test_e_books_are_indexed_searched_and_cited_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    make_book(folder / "keeper.epub")
    make_book(folder / "locked.epub", encrypted=["OEBPS/text/chapter1.xhtml"])
    (folder / "cut.epub").write_bytes((folder / "keeper.epub").read_bytes()[:700])  # a cut download
    with zipfile.ZipFile(folder / "photos.epub", "w") as z:  # a zip, but no e-book
        z.writestr("photo.txt", "hello")
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1
    assert "DRM" in reasons["locked.epub"] and "1 of 2 chapters" in reasons["locked.epub"]
    assert "damaged" in reasons["cut.epub"] and "not an e-book" in reasons["photos.epub"]
    hits = retrieval.search(library, ["books"], "Who kept the lamp lit during the storms of 1911?")
    assert hits and hits[0].path.endswith("keeper.epub") and "Lighthouse" in hits[0].heading
    assert grounding.label(hits[0]).startswith("keeper.epub · ")  # by its headings: a reader shows no lines
    library.close()


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = make_book(tmp_path / "bomb.epub", inflate=MAX_XHTML_BYTES // 2 + (1 << 20))  # each of the two chapters
    assert bomb.stat().st_size < 2 << 20  # a couple of MB on disk
    with pytest.raises(readers.UnreadableFile, match="would unpack to"):
        readers.read(bomb)
