"""Word documents in the library (engine/documents/docx_reader.py): real .docx files written by
python-docx, read back as Markdown in body order, indexed, searched and located by section; damaged,
password-protected and zip-bomb files refused with a reason while the rest of the folder is indexed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import docx
import pytest

from engine.documents import chunks, grounding, readers, retrieval
from engine.documents.docx_reader import MAX_XML_BYTES, OLE_MAGIC
from tests.indexed_folder import indexed_folder


def make_report(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Field report", level=0)
    document.add_heading("Water supply", level=1)
    document.add_paragraph("The northern well ran dry in August; the village now draws from the river pump.")
    document.add_paragraph("Boil the water before drinking", style="List Bullet")
    document.add_paragraph("Clean the filter every Sunday", style="List Bullet")
    document.add_heading("Budget", level=1)
    table = document.add_table(rows=3, cols=2)
    rows = [("Item", "Cost"), ("Pump repair", "420 EUR"), ("Filters | spare", "85 EUR")]
    for row, (item, cost) in zip(table.rows, rows, strict=True):
        row.cells[0].text, row.cells[1].text = item, cost
    document.add_paragraph("The council approved the budget on the second vote.")
    document.save(path)
    return path


def test_a_word_document_reads_as_markdown_in_body_order(tmp_path):
    doc = readers.read(make_report(tmp_path / "report.docx"))
    assert doc.format is readers.Format.MARKDOWN and len(doc.pages) == 1
    text = doc.pages[0].text
    assert text.startswith("# Field report\n\n## Water supply\n\nThe northern well ran dry")
    assert "- Boil the water before drinking\n- Clean the filter every Sunday" in text
    assert "| Item | Cost |\n| --- | --- |\n| Pump repair | 420 EUR |\n| Filters \\| spare | 85 EUR |" in text
    assert text.index("## Budget") < text.index("| Item") < text.index("The council approved")
    # passages follow the sections
    found = {p.heading: p.text for p in chunks.passages(doc)}
    assert any("Budget" in h and "Pump repair" in t for h, t in found.items())


def test_word_documents_are_indexed_searched_and_cited_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    make_report(folder / "report.docx")
    (folder / "locked.docx").write_bytes(OLE_MAGIC + b"\0" * 4096)  # what Word writes for a password-protected file
    (folder / "cut.docx").write_bytes((folder / "report.docx").read_bytes()[:2000])  # a cut download
    with zipfile.ZipFile(folder / "notes.docx", "w") as z:  # a zip, but not a Word document
        z.writestr("readme.txt", "hello")
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1 and library.counts("notes")[2] == 3
    assert "password-protected" in reasons["locked.docx"]
    assert "damaged" in reasons["cut.docx"] and "Word document" in reasons["notes.docx"]
    hits = retrieval.search(library, ["notes"], "When was the pump budget approved by the council?")
    assert hits and hits[0].path.endswith("report.docx") and "Budget" in hits[0].heading
    assert grounding.label(hits[0]).startswith("report.docx · ")  # by its headings: Word shows no line numbers
    library.close()


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = tmp_path / "bomb.docx"
    block = b" " * (1 << 20)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z, z.open("word/document.xml", "w", force_zip64=True) as f:
        for _ in range(MAX_XML_BYTES // len(block) + 1):
            f.write(block)
    assert bomb.stat().st_size < 2 << 20  # a couple of MB on disk
    with pytest.raises(readers.UnreadableFile, match="would unpack to"):
        readers.read(bomb)
