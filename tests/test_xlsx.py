"""Excel workbooks in the library and as attachments (engine/documents/xlsx_reader.py): real .xlsx files
written by openpyxl, read back a sheet a page as Markdown tables (columns by reference, empty rows and
columns left out, booleans, a formula saved without its value, a hidden sheet), indexed, searched and
cited by sheet; a password-protected or old .xls file, a cut download, a zip that is no workbook and a
zip bomb refused with a reason while the rest of the folder is indexed."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from app.core import attachments as files
from app.core.attachments import AttachmentError
from engine.documents import readers, retrieval
from engine.documents.docx_reader import OLE_MAGIC
from engine.documents.office_zip import MAX_XML_BYTES
from tests.indexed_folder import broken_beside, indexed_folder, padded_to_bomb


def make_workbook(path: Path) -> Path:
    book = openpyxl.Workbook()
    budget = book.active
    budget.title = "Budget"
    budget.append(["Item", "Cost", "Approved"])
    budget.append(["Roof repair", 4200, True])
    budget.append([])  # an empty row
    budget.append(["Gutters | downpipes", 380.5, False])
    budget["E2"] = "ask the council"  # column D left empty
    budget["B5"] = "=SUM(B2:B4)"  # openpyxl saves formulas without their values
    staff = book.create_sheet("Staff")
    staff.append(["Name", "Role"])
    staff.append(["Mirela", "Treasurer, signs every invoice over 500 EUR"])
    hidden = book.create_sheet("Old")
    hidden.append(["Archived plan"])
    hidden.sheet_state = "hidden"
    book.create_sheet("Empty")
    book.save(path)
    return path


def test_a_workbook_reads_as_markdown_tables_a_sheet_a_page(tmp_path):
    doc = readers.read(make_workbook(tmp_path / "hall.xlsx"))
    assert doc.format is readers.Format.MARKDOWN and [p.number for p in doc.pages] == [1, 2, 3, 4]
    assert doc.pages[0].text == (
        "# Budget\n\n"
        "| Item | Cost | Approved |  |\n| --- | --- | --- | --- |\n"
        "| Roof repair | 4200 | TRUE | ask the council |\n"
        "| Gutters \\| downpipes | 380.5 | FALSE |  |\n"
        "|  | =SUM(B2:B4) |  |  |"
    )
    assert doc.pages[1].text.startswith("# Staff\n\n| Name | Role |")
    assert doc.pages[2].text == "# Old\n\n| Archived plan |\n| --- |"  # hidden, read all the same
    assert doc.pages[3].text == ""


def test_workbooks_are_indexed_searched_and_cited_by_sheet_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "club"
    folder.mkdir()
    make_workbook(folder / "hall.xlsx")
    broken_beside(folder / "hall.xlsx")
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1
    assert "password-protected, or an old Excel (.xls)" in reasons["locked.xlsx"]
    assert "damaged" in reasons["cut.xlsx"] and "no xl/workbook.xml" in reasons["photos.xlsx"]
    hits = retrieval.search(library, ["club"], "Who signs the invoices over 500 EUR?")
    assert hits and hits[0].where() == "hall.xlsx, sheet 2" and hits[0].heading == "Staff"
    library.close()


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    bomb = padded_to_bomb(make_workbook(tmp_path / "bomb.xlsx"), "xl/worksheets/padding.xml", MAX_XML_BYTES)
    with pytest.raises(readers.UnreadableFile, match="would unpack to"):
        readers.read(bomb)


def test_a_workbook_is_attached_as_markdown(tmp_path):
    attached = files.read(make_workbook(tmp_path / "hall.xlsx"))
    assert attached.kind == "document" and attached.text.startswith("# Budget\n\n| Item | Cost |")
    assert "# Staff" in attached.text
    (tmp_path / "old.xlsx").write_bytes(OLE_MAGIC + bytes(64))
    with pytest.raises(AttachmentError, match="old.xlsx: password-protected, or an old Excel"):
        files.read(tmp_path / "old.xlsx")
