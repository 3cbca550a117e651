"""Jupyter notebooks in the library and as attachments (engine/documents/notebook_reader.py): a notebook
laid out as Jupyter writes nbformat 4 (sources as lists of lines, a kernelspec, stream, result, image and
error outputs) read as Markdown in cell order, indexed, searched and cited; nbformat 3's worksheets read
too; a cut download, JSON that is no notebook and a binary file named .ipynb refused with a reason while
the rest of the folder is indexed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core import attachments as files
from app.core.attachments import AttachmentError
from engine.documents import readers, retrieval
from engine.documents.notebook_reader import MAX_OUTPUT_CHARS
from tests.indexed_folder import indexed_folder


def lines(text: str) -> list[str]:
    """A multiline string as Jupyter stores it: a list of lines that keep their line ends."""
    return text.splitlines(keepends=True)


def cell(kind: str, source: str, outputs: list | None = None) -> dict:
    made = {"cell_type": kind, "metadata": {}, "source": lines(source)}
    if kind == "code":
        made |= {"execution_count": 1, "outputs": outputs or []}
    return made


IMAGE = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
CELLS = [
    cell("markdown", "# Rainfall survey\n\nDaily totals from the hill station, cleaned before plotting."),
    cell(
        "code",
        "import statistics\nrain = [4.2, 0.0, 11.5, 7.1]\nprint('mean', statistics.mean(rain))\nmax(rain)",
        [
            {"output_type": "stream", "name": "stdout", "text": lines("mean 5.7\n")},
            {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": ["11.5"]}, "metadata": {}},
            IMAGE,
        ],
    ),
    cell("markdown", "## Gauge faults\n\nThe gauge froze on the second night, so that zero is not a dry day."),
    cell(
        "code",
        "rain[1] / 0",
        [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "float division by zero", "traceback": []}],
    ),
    cell("code", "for day in range(1000):\n    print(day)", [{"output_type": "stream", "name": "stdout",
                                                             "text": "".join(f"{d}\n" for d in range(1000))}]),
    cell("raw", ""),
]  # fmt: skip


def make_notebook(path: Path, cells: list[dict] = CELLS, language: str = "python") -> Path:
    metadata = {"kernelspec": {"display_name": "Python 3", "language": language, "name": "python3"}}
    path.write_text(json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    return path


def test_a_notebook_reads_as_markdown_in_cell_order(tmp_path):
    doc = readers.read(make_notebook(tmp_path / "rain.ipynb"))
    assert doc.format is readers.Format.MARKDOWN and len(doc.pages) == 1
    text = doc.pages[0].text
    assert text.startswith(
        "# Rainfall survey\n\nDaily totals from the hill station, cleaned before plotting.\n\n"
        "```python\nimport statistics\nrain = [4.2, 0.0, 11.5, 7.1]\nprint('mean', statistics.mean(rain))\n"
        "max(rain)\n```\n\n"
        "Output:\n```text\nmean 5.7\n11.5\n```\n\n"
        "(1 output not text: an image or other rich output)\n\n"
        "## Gauge faults\n\n"
    )
    assert "```python\nrain[1] / 0\n```\n\nOutput:\n```text\nZeroDivisionError: float division by zero\n```" in text
    # A long printout is cut, not dropped; the empty raw cell leaves nothing behind.
    long_output = text[text.index("for day in range(1000)") :]
    assert "\n0\n1\n" in long_output and "999" not in long_output and long_output.rstrip().endswith("…\n```")
    assert len(long_output) < MAX_OUTPUT_CHARS + 200


def test_an_older_notebook_and_another_kernels_language_read_too(tmp_path):
    old = tmp_path / "old.ipynb"
    worksheet = {"cells": [{"cell_type": "heading", "level": 2, "source": ["Setup"]},
                           {"cell_type": "code", "input": ["x <- c(1, 2)\n", "mean(x)"], "language": "r",
                            "outputs": [{"output_type": "pyout", "text": ["[1] 1.5"]}]}]}  # fmt: skip
    old.write_text(json.dumps({"worksheets": [worksheet], "metadata": {}, "nbformat": 3}))
    assert readers.read(old).pages[0].text == (
        "## Setup\n\n```r\nx <- c(1, 2)\nmean(x)\n```\n\nOutput:\n```text\n[1] 1.5\n```\n"
    )
    r_notebook = make_notebook(tmp_path / "r.ipynb", [cell("code", "summary(cars)")], language="R")
    assert readers.read(r_notebook).pages[0].text == "```r\nsummary(cars)\n```\n"


def test_notebooks_are_indexed_searched_and_cited_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "analysis"
    folder.mkdir()
    make_notebook(folder / "rain.ipynb")
    (folder / "cut.ipynb").write_text(make_notebook(tmp_path / "x.ipynb").read_text()[:300])  # a cut download
    (folder / "settings.ipynb").write_text('{"theme": "dark"}')  # JSON, but no notebook
    (folder / "photo.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    library, report, reasons = indexed_folder(tmp_path, folder)
    assert report.read == 1
    assert "damaged notebook (not JSON" in reasons["cut.ipynb"] and "no cells" in reasons["settings.ipynb"]
    assert "not a notebook" in reasons["photo.ipynb"]
    hits = retrieval.search(library, ["analysis"], "Why is the zero on the second night not a dry day?")
    assert hits and hits[0].path.endswith("rain.ipynb") and "Gauge faults" in hits[0].heading
    assert hits[0].where() == "rain.ipynb"  # the lines of its Markdown are nowhere in the notebook
    library.close()


def test_a_notebook_is_attached_as_markdown(tmp_path):
    attached = files.read(make_notebook(tmp_path / "rain.ipynb"))
    assert attached.kind == "document" and attached.text.startswith("# Rainfall survey")
    assert attached.quoted().startswith("File: rain.ipynb\n````\n# Rainfall survey")  # its fences cannot close it
    (tmp_path / "cut.ipynb").write_text('{"cells": [')
    with pytest.raises(AttachmentError, match="cut.ipynb: a damaged notebook"):
        files.read(tmp_path / "cut.ipynb")
