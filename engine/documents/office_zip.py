"""The checks an Office Open XML file (.pptx, .xlsx) passes before any of its XML is parsed: not an OLE file
(what a password-protected document is, and an old .ppt or .xls renamed), a readable zip, holding the part
that makes it this kind of file, and not a zip bomb (its XML would inflate beyond MAX_XML_BYTES)."""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from xml.etree import ElementTree

from engine.documents.docx_reader import OLE_MAGIC

MAX_XML_BYTES = 200 * 1024 * 1024  # the uncompressed XML of one file: a 500-slide deck is a few MB
RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"


class OfficeFileError(Exception):
    """An Office file that cannot be read; str() says why."""


def checked_zip(path: Path, main_part: str, kind: str, program: str, old_suffix: str) -> zipfile.ZipFile:
    """The file as an open zip, checked; OfficeFileError says why it cannot be read. kind names the file
    ("PowerPoint presentation"), program the one that saves it anew, old_suffix its pre-2007 format."""
    with open(path, "rb") as f:
        if f.read(8) == OLE_MAGIC:
            raise OfficeFileError(
                f"password-protected, or an old {program} ({old_suffix}) file: "
                f"open it in {program} and save it as {path.suffix.lower()}"
            )
    try:
        z = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise OfficeFileError(f"not a {kind}, or a damaged one (not a readable zip file)") from None
    sizes = {i.filename: i.file_size for i in z.infolist()}
    xml = sum(size for name, size in sizes.items() if name.endswith((".xml", ".rels")))
    if main_part not in sizes:
        z.close()
        raise OfficeFileError(f"not a {kind} (no {main_part} inside)")
    if xml > MAX_XML_BYTES:
        z.close()
        raise OfficeFileError(f"its text would unpack to {xml / 2**20:.0f} MB, more than {MAX_XML_BYTES // 2**20} MB")
    return z


def relations(z: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """A part's relationships inside the package: id -> (the target's part name, the relationship's type).
    A target is relative to the part's folder, or absolute from the package's root."""
    folder, name = posixpath.split(part)
    rels = f"{folder}/_rels/{name}.rels"
    if rels not in z.namelist():
        return {}
    found = {}
    for rel in ElementTree.fromstring(z.read(rels)).iter(f"{RELS}Relationship"):
        target = rel.get("Target", "")
        if rel.get("TargetMode") != "External":
            where = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
            found[rel.get("Id")] = (posixpath.normpath(where), rel.get("Type", ""))
    return found
