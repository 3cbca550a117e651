"""A folder of test documents indexed as a collection of its own name, with the reason each file that
could not be read gave (by file name), and a zip bomb made of a real file: what the reader tests of each
format check."""

from __future__ import annotations

import zipfile
from pathlib import Path

from engine.documents import indexer
from engine.documents.library import Library


def indexed_folder(tmp_path: Path, folder: Path) -> tuple[Library, indexer.Report, dict[str, str]]:
    library = Library(tmp_path / "lib")
    library.add_collection(folder.name)
    library.add_sources(folder.name, [folder])
    report = indexer.update(library, folder.name)
    return library, report, {Path(path).name: reason for path, reason in report.errors}


def padded_to_bomb(path: Path, member: str, size: int) -> Path:
    """path (a zip) with one more member, `size` bytes of blank space that compress to almost nothing."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z, z.open(member, "w", force_zip64=True) as f:
        for _ in range(size // (1 << 20) + 1):
            f.write(b" " * (1 << 20))
    assert path.stat().st_size < 2 << 20  # a couple of MB on disk
    return path


def broken_beside(good: Path) -> None:
    """Three bad files of good's kind beside it: locked (an OLE file, as Office saves a password-protected
    document), cut (a download stopped at 700 bytes) and photos (a zip, but not a document)."""
    suffix, folder = good.suffix, good.parent
    (folder / f"locked{suffix}").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    (folder / f"cut{suffix}").write_bytes(good.read_bytes()[:700])
    with zipfile.ZipFile(folder / f"photos{suffix}", "w") as z:
        z.writestr("photo.txt", "hello")
