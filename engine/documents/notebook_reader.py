"""Jupyter notebooks (.ipynb) as Markdown: Markdown cells as they are, code cells fenced in the notebook's
language, and what a cell printed (its text outputs) fenced after it, cut to MAX_OUTPUT_CHARS; images and
other rich outputs are left out, with a line saying so.

A notebook is JSON (nbformat 4, and the older 3 with its worksheets). Read with the standard library:
a file that is not JSON, or JSON that is not a notebook, is refused with the reason. Its cells are kept in
order, so a passage's lines are lines of this Markdown, as for Word and OpenDocument files.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_OUTPUT_CHARS = 2000  # of one cell's printed output: a loop's thousand lines say little about the code


class NotebookError(Exception):
    """A notebook that cannot be read; str() says why."""


def notebook_markdown(path: Path) -> str:
    """The notebook's cells as Markdown; NotebookError says why it cannot be read."""
    try:
        notebook = json.loads(path.read_bytes())
    except UnicodeDecodeError:
        raise NotebookError("not a notebook (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise NotebookError(f"a damaged notebook (not JSON: {e.msg} at line {e.lineno})") from None
    if not isinstance(notebook, dict):
        raise NotebookError("not a notebook (no cells in it)")
    cells = notebook.get("cells")
    if cells is None and isinstance(notebook.get("worksheets"), list):  # nbformat 3
        cells = [c for sheet in notebook["worksheets"] if isinstance(sheet, dict) for c in sheet.get("cells") or []]
    if not isinstance(cells, list):
        raise NotebookError("not a notebook (no cells in it)")
    language = _language(notebook.get("metadata"))
    parts = [part for cell in cells if isinstance(cell, dict) for part in _cell(cell, language)]
    return "\n\n".join(parts) + "\n" if parts else ""


def _language(metadata: object) -> str:
    """The fence's language: the kernel's, else the language info's, else Python (Jupyter's default)."""
    if isinstance(metadata, dict):
        for where in ("kernelspec", "language_info"):
            entry = metadata.get(where)
            name = entry.get("language" if where == "kernelspec" else "name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name.strip():
                return name.strip().lower()
    return "python"


def _cell(cell: dict, language: str) -> list[str]:
    kind = cell.get("cell_type")
    source = _joined(cell.get("source", cell.get("input", ""))).strip("\n")  # "input": nbformat 3's code
    if kind == "markdown" or kind == "raw" or kind == "heading":  # "heading": nbformat 3's own cell
        if kind == "heading" and source:
            level = cell.get("level") if isinstance(cell.get("level"), int) else 1
            source = "#" * max(1, min(6, level)) + " " + source
        return [source] if source.strip() else []
    if kind != "code":
        return []
    if isinstance(cell.get("language"), str) and cell["language"].strip():  # nbformat 3 names it per cell
        language = cell["language"].strip().lower()
    parts = [_fenced(source, language)] if source.strip() else []
    printed, left_out = _outputs(cell.get("outputs"))
    if printed:
        parts.append("Output:\n" + _fenced(printed, "text"))
    if left_out:
        parts.append(f"({left_out} output{'s' if left_out > 1 else ''} not text: an image or other rich output)")
    return parts


def _outputs(outputs: object) -> tuple[str, int]:
    """A code cell's text outputs joined and cut to MAX_OUTPUT_CHARS, and how many outputs were not text."""
    texts, left_out = [], 0
    for output in outputs if isinstance(outputs, list) else ():
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind in ("stream",):
            texts.append(_joined(output.get("text")))
        elif kind == "error":
            texts.append(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")
        elif kind in ("execute_result", "display_data", "pyout"):
            data = output.get("data") if isinstance(output.get("data"), dict) else output  # pyout: nbformat 3
            plain = data.get("text/plain", data.get("text"))
            if plain is not None:
                texts.append(_joined(plain))
            else:
                left_out += 1
    text = "\n".join(t.rstrip("\n") for t in texts if t.strip())
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS].rsplit("\n", 1)[0] + "\n…"
    return text, left_out


def _joined(value: object) -> str:
    """A notebook's multiline string: one string, or a list of lines that keep their line ends."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return ""


def _fenced(text: str, language: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"
