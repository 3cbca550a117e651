"""PowerPoint presentations in the library and as attachments (engine/documents/pptx_reader.py): real .pptx
files written by python-pptx, read back a slide a page as Markdown (title, bullet levels, text boxes, a
table, a group, speaker notes), indexed, searched and cited by slide; a password-protected or old .ppt
file, a cut download, a zip that is no presentation and a zip bomb refused with a reason while the rest
of the folder is indexed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pptx import Presentation
from pptx.util import Inches

from app.core import attachments as files
from app.core.attachments import AttachmentError
from engine.documents import readers, retrieval
from engine.documents.docx_reader import OLE_MAGIC
from engine.documents.office_zip import MAX_XML_BYTES
from tests.indexed_folder import broken_beside, indexed_folder, padded_to_bomb


def make_deck(path: Path) -> Path:
    deck = Presentation()
    title_slide = deck.slides.add_slide(deck.slide_layouts[0])
    title_slide.shapes.title.text = "Bridge inspection"
    title_slide.placeholders[1].text = "Spring survey of the river crossings"

    points = deck.slides.add_slide(deck.slide_layouts[1])
    points.shapes.title.text = "Findings"
    body = points.placeholders[1].text_frame
    body.text = "The east pier has a crack"
    for text, level in (("Width 3 mm, growing since March", 1), ("Bearings need grease", 0)):
        paragraph = body.add_paragraph()
        paragraph.text, paragraph.level = text, level
    box = points.shapes.add_textbox(Inches(1), Inches(6), Inches(4), Inches(1))
    box.text_frame.text = "Photos are in the shared folder."
    points.notes_slide.notes_text_frame.text = "Close the east lane before the divers go down."

    costs = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    costs.shapes.title.text = "Costs"
    table = costs.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([("Item", "Cost"), ("Crack injection", "12,000 EUR"), ("Grease | bearings", "800 EUR")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    group = costs.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(5), Inches(3), Inches(1)).text_frame.text = "Council votes in May."

    deck.slides.add_slide(deck.slide_layouts[6])  # blank: no text at all
    deck.save(path)
    return path


def test_a_presentation_reads_as_markdown_a_slide_a_page(tmp_path):
    doc = readers.read(make_deck(tmp_path / "bridges.pptx"))
    assert doc.format is readers.Format.MARKDOWN
    assert [page.number for page in doc.pages] == [1, 2, 3, 4]
    assert doc.pages[0].text == "# Bridge inspection\n\n- Spring survey of the river crossings"
    assert doc.pages[1].text == (
        "# Findings\n\n"
        "- The east pier has a crack\n  - Width 3 mm, growing since March\n- Bearings need grease\n\n"
        "Photos are in the shared folder.\n\n"
        "Notes: Close the east lane before the divers go down."
    )
    assert doc.pages[2].text == (
        "# Costs\n\n| Item | Cost |\n| --- | --- |\n| Crack injection | 12,000 EUR |\n"
        "| Grease \\| bearings | 800 EUR |\n\nCouncil votes in May."
    )
    assert doc.pages[3].text == ""


def test_presentations_are_indexed_searched_and_cited_by_slide_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "talks"
    folder.mkdir()
    make_deck(folder / "bridges.pptx")
    broken_beside(folder / "bridges.pptx")
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1
    assert "password-protected, or an old PowerPoint (.ppt)" in reasons["locked.pptx"]
    assert "damaged" in reasons["cut.pptx"] and "no ppt/presentation.xml" in reasons["photos.pptx"]
    hits = retrieval.search(library, ["talks"], "Which lane must be closed before the divers go down?")
    assert hits and hits[0].path.endswith("bridges.pptx") and hits[0].where() == "bridges.pptx, slide 2"
    assert "Findings" in hits[0].heading
    library.close()


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = padded_to_bomb(make_deck(tmp_path / "bomb.pptx"), "ppt/slides/padding.xml", MAX_XML_BYTES)
    with pytest.raises(readers.UnreadableFile, match="would unpack to"):
        readers.read(bomb)


def test_a_presentation_is_attached_as_markdown(tmp_path):
    attached = files.read(make_deck(tmp_path / "bridges.pptx"))
    assert attached.kind == "document" and attached.text.startswith("# Bridge inspection")
    assert "Notes: Close the east lane" in attached.text
    (tmp_path / "old.pptx").write_bytes(OLE_MAGIC + bytes(64))
    with pytest.raises(AttachmentError, match="old.pptx: password-protected, or an old PowerPoint"):
        files.read(tmp_path / "old.pptx")
