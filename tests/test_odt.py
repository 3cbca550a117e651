"""OpenDocument text in the library (engine/documents/odt_reader.py): .odt files laid out as the ODF
specification has them (a stored mimetype first, content.xml, META-INF/manifest.xml), read as Markdown
in body order, indexed, searched and cited; a password-protected file, a cut download, a zip that is no
document and a zip bomb refused with a reason while the rest of the folder is indexed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from engine.documents import readers, retrieval
from engine.documents.odt_reader import MAX_XML_BYTES
from tests.indexed_folder import indexed_folder

NAMESPACES = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
)
BODY = """
<text:sequence-decls/>
<text:h text:outline-level="1">Harvest <text:span>notes</text:span></text:h>
<text:p>The orchard gave <text:s text:c="3"/>forty crates of apples<text:note><text:note-citation>1</text:note-citation><text:note-body><text:p>Counted twice.</text:p></text:note-body></text:note> this autumn.</text:p>
<text:list><text:list-item><text:p>Press the windfalls first</text:p></text:list-item>
<text:list-item><text:p>Store the <text:a xlink:href="#x" xmlns:xlink="http://www.w3.org/1999/xlink">russets</text:a> cold</text:p></text:list-item></text:list>
<text:section><text:h text:outline-level="2">Costs</text:h>
<table:table><table:table-row><table:table-cell><text:p>Item</text:p></table:table-cell><table:table-cell><text:p>Cost</text:p></table:table-cell></table:table-row>
<table:table-row><table:table-cell><text:p>Crates | new</text:p></table:table-cell><table:table-cell><text:p>60 EUR</text:p></table:table-cell></table:table-row></table:table>
<text:p>The cider press needs a new gasket before the frost.<office:annotation><text:p>Ask Tom.</text:p></office:annotation></text:p></text:section>
"""


def manifest(encrypted: bool = False) -> str:
    encryption = (
        '<manifest:encryption-data manifest:checksum-type="SHA1/1K" manifest:checksum="x">'
        '<manifest:algorithm manifest:algorithm-name="Blowfish CFB" manifest:initialisation-vector="x"/>'
        "</manifest:encryption-data>"
        if encrypted
        else ""
    )
    return (
        '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">'
        '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
        f'<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml">{encryption}'
        "</manifest:file-entry></manifest:manifest>"
    )


def make_odt(path: Path, body: str = BODY, encrypted: bool = False, inflate: int = 0) -> Path:
    """An .odt as the specification lays it out; `inflate`: bytes of blank space content.xml unpacks to."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text", compress_type=zipfile.ZIP_STORED)
        with z.open("content.xml", "w", force_zip64=True) as f:
            f.write(
                f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {NAMESPACES} office:version="1.3">'
                f"<office:body><office:text>{body}</office:text></office:body></office:document-content>".encode()
            )
            for _ in range(inflate // (1 << 20)):
                f.write(b" " * (1 << 20))
        z.writestr("META-INF/manifest.xml", manifest(encrypted))
    return path


def test_an_opendocument_text_reads_as_markdown_in_body_order(tmp_path):
    doc = readers.read(make_odt(tmp_path / "harvest.odt"))
    assert doc.format is readers.Format.MARKDOWN and len(doc.pages) == 1
    assert doc.pages[0].text == (
        "# Harvest notes\n\n"
        "The orchard gave forty crates of apples this autumn.\n\n"  # the footnote left out of the sentence
        "- Press the windfalls first\n- Store the russets cold\n\n"
        "## Costs\n\n"
        "| Item | Cost |\n| --- | --- |\n| Crates \\| new | 60 EUR |\n\n"
        "The cider press needs a new gasket before the frost.\n"  # and the comment
    )


def test_opendocument_texts_are_indexed_and_searched_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    make_odt(folder / "harvest.odt")
    make_odt(folder / "locked.odt", encrypted=True)
    (folder / "cut.odt").write_bytes((folder / "harvest.odt").read_bytes()[:500])  # a cut download
    with zipfile.ZipFile(folder / "photos.odt", "w") as z:  # a zip, but no document
        z.writestr("photo.txt", "hello")
    (folder / "broken.odt").write_bytes(make_odt(tmp_path / "x.odt", body="<text:p>unclosed").read_bytes())
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1
    assert "password-protected" in reasons["locked.odt"] and "damaged" in reasons["cut.odt"]
    assert "no content.xml" in reasons["photos.odt"] and "damaged" in reasons["broken.odt"]
    hits = retrieval.search(library, ["notes"], "What does the cider press need before the frost?")
    assert hits and hits[0].path.endswith("harvest.odt") and "Costs" in hits[0].heading
    library.close()


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = make_odt(tmp_path / "bomb.odt", inflate=MAX_XML_BYTES + (1 << 20))
    assert bomb.stat().st_size < 2 << 20  # a couple of MB on disk
    with pytest.raises(readers.UnreadableFile, match="would unpack to"):
        readers.read(bomb)
