"""Excel workbooks (.xlsx) as Markdown, a sheet at a time: the sheet's name as a `#` line, then its cells
as a Markdown table whose first row is the header, columns placed by their references (a skipped column
stays an empty cell), empty rows and columns left out. A formula gives the value Excel last computed and
saved with it (the formula itself where none was saved); a date is the number Excel stores for it (styles
are not read). Each sheet is a page of its
own, so a passage never spans two sheets and is cited as "budget.xlsx, sheet 2"; hidden sheets are read
too (their text is the author's all the same).

A .xlsx is a zip of SpreadsheetML parts (ECMA-376), read with the standard library as pptx_reader.py reads
presentations (openpyxl reads them well, but loads every cell's style to give text that needs none).
Checked before anything is parsed (office_zip.py: a password-protected file, an old .xls, a damaged zip,
a zip bomb); expat resolves no external entities and refuses entity bombs.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path
from xml.etree import ElementTree

from engine.documents.office_zip import OfficeFileError, checked_zip, relations

S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
CELL_REF = re.compile(r"([A-Z]+)(\d+)$")


def xlsx_sheets(path: Path) -> list[str]:
    """Each sheet as Markdown, in the workbook's order ("" for an empty one); OfficeFileError says why the
    file cannot be read."""
    try:
        with checked_zip(path, "xl/workbook.xml", "Excel workbook", "Excel", ".xls") as z:
            strings = _shared_strings(z)
            return [_sheet(name, ElementTree.fromstring(z.read(part)), strings) for name, part in _sheet_parts(z)]
    except (zipfile.BadZipFile, zlib.error, EOFError, ElementTree.ParseError, KeyError, ValueError, IndexError) as e:
        raise OfficeFileError(f"a damaged Excel workbook ({type(e).__name__}: {e})") from None


def _sheet_parts(z: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(name, part) of each sheet, in the workbook's order."""
    workbook = ElementTree.fromstring(z.read("xl/workbook.xml"))
    targets = relations(z, "xl/workbook.xml")
    return [(sheet.get("name", ""), targets[sheet.get(f"{R}id")][0]) for sheet in workbook.iter(f"{S}sheet")]


def _shared_strings(z: zipfile.ZipFile) -> list[str]:
    if "xl/sharedStrings.xml" not in z.namelist():
        return []
    table = ElementTree.fromstring(z.read("xl/sharedStrings.xml"))
    return [_text(item) for item in table.findall(f"{S}si")]


def _text(item) -> str:
    """A string item's text: plain, or its rich text's runs (a phonetic guide, rPh, left out)."""
    plain = item.find(f"{S}t")
    if plain is not None:
        return plain.text or ""
    return "".join(t.text or "" for run in item.findall(f"{S}r") for t in run.findall(f"{S}t"))


def _sheet(name: str, sheet, strings: list[str]) -> str:
    rows: list[dict[int, str]] = []
    for row in sheet.iter(f"{S}row"):
        cells, column = {}, 0
        for cell in row.findall(f"{S}c"):
            found = CELL_REF.match(cell.get("r", ""))
            column = _column(found.group(1)) if found else column + 1
            value = " ".join(_value(cell, strings).split()).replace("|", "\\|")
            if value:
                cells[column] = value
        if cells:
            rows.append(cells)
    if not rows:
        return ""
    used = sorted({column for cells in rows for column in cells})
    lines = [f"# {name}", ""]
    for i, cells in enumerate(rows):
        lines.append("| " + " | ".join(cells.get(column, "") for column in used) + " |")
        if i == 0:
            lines.append("|" + " --- |" * len(used))
    return "\n".join(lines)


def _column(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - ord("A") + 1
    return number


def _value(cell, strings: list[str]) -> str:
    kind = cell.get("t", "n")
    if kind == "inlineStr":
        inline = cell.find(f"{S}is")
        return _text(inline) if inline is not None else ""
    v = cell.find(f"{S}v")
    raw = v.text or "" if v is not None else ""
    formula = cell.find(f"{S}f")
    if not raw and formula is not None and formula.text:
        return "=" + formula.text  # saved without its value (a program other than Excel wrote it)
    if kind == "s":
        return strings[int(raw)] if raw else ""
    if kind == "b":
        return {"1": "TRUE", "0": "FALSE"}.get(raw, raw)
    return raw  # a number, a formula's string ("str") or an error ("e": "#DIV/0!")
