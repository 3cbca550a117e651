"""Passages reflowed for the prompt: hard-wrapped prose joined, everything else kept (engine/documents/reflow.py).

On Debian's licence texts (real documents nobody here wrote) and on small Markdown, code and list samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.documents import grounding
from engine.documents.reflow import CODE, MARKUP, TEXT, reflow
from engine.documents.retrieval import Hit

GPL3 = Path("/usr/share/common-licenses/GPL-3")


def _paragraph(text: str, start: str) -> str:
    """The paragraph of text that starts with these words, its lines as the file has them."""
    begin = text.index(start)
    end = text.find("\n\n", begin)
    return text[begin:end]


@pytest.mark.skipif(not GPL3.exists(), reason="Debian's base-files licence texts are not on this machine")
def test_a_hard_wrapped_licence_paragraph_becomes_one_line_with_single_spaces():
    text = GPL3.read_text(encoding="utf-8")
    wrapped = _paragraph(text, "Some devices are designed to deny users access")
    assert wrapped.count("\n") >= 5 and ".  " in wrapped  # wrapped at ~72 columns, two spaces after a full stop
    joined = reflow(text)
    words = " ".join(wrapped.split())
    assert words in joined  # the paragraph is one line: running text, one space between words
    # nothing but whitespace moved: the words of the whole file are the same, in the same order
    assert joined.split() == text.split()


def test_list_items_keep_their_lines_and_their_wrapped_continuations_join_them():
    text = (
        "Do this:\n\n  a) the first thing, which is\n  long enough to wrap;\n  b) the second\n  thing.\n- one\n- two\n"
    )
    assert (
        reflow(text)
        == "Do this:\n\n  a) the first thing, which is long enough to wrap;\n  b) the second thing.\n- one\n- two\n"
    )


def test_markdown_code_headings_tables_and_indented_blocks_are_kept():
    text = (
        "# Install\n"
        "Run the installer and\nfollow its steps.\n"
        "```\nmake\nmake install\n```\n"
        "| a | b |\n| - | - |\n"
        "Example:\n\n    pip install x\n    pip install y\n"
    )
    out = reflow(text, MARKUP)
    assert "Run the installer and follow its steps." in out
    assert "```\nmake\nmake install\n```" in out
    assert "| a | b |\n| - | - |" in out
    assert "    pip install x\n    pip install y" in out
    assert out.startswith("# Install\n")


def test_source_code_is_left_as_it_is():
    code = "def f(x):\n    return x  +  1\n\n\nclass A:\n    pass\n"
    assert reflow(code, CODE) == code


def test_the_prompt_and_the_drafts_give_a_passage_reflowed_by_its_kind_of_file():
    def hit(path: str, text: str) -> Hit:
        return Hit("c", path, text, "", 1, text.count("\n") + 1, None, 1.0)

    prose, code = hit("/docs/notes.txt", "one line\nand the next"), hit("/src/tool.py", "x = 1\ny = 2")
    message = grounding.message_with("What?", [prose, code])
    assert "one line and the next" in message and "x = 1\ny = 2" in message
    found = grounding.Grounded(message, [prose, code], drafts=[prose, code])
    assert found.draft_texts == ["one line and the next", "x = 1\ny = 2"]
    assert reflow("text\nmore", TEXT) == "text more"
