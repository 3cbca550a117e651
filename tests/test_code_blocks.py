"""Code blocks: syntax colours from Pygments, the frame as soon as a fence streams in, long lines
scrolling inside the block."""

from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QGuiApplication, QTextCursor
from PySide6.QtWidgets import QApplication

from app.chat.rich_text import PROSE_MAX_EM, CodeBlock, MessageBody, TextPane
from app.core.store import Token
from app.ui import theme

CODE = "def add(a, b):\n    # the sum\n    return a + b  # 🙂 done\n"


def colour_at(block: CodeBlock, word: str) -> QColor:
    """The foreground of the first character of word in the block's rendered document."""
    doc = block.view.document()
    text = doc.toPlainText()
    cursor = QTextCursor(doc)
    cursor.setPosition(len(text[: text.index(word)].encode("utf-16-le")) // 2 + 1)
    return cursor.charFormat().foreground().color()


def test_known_languages_are_coloured_and_unknown_ones_stay_plain(qtbot):
    python = CodeBlock(CODE, "py")
    plain = CodeBlock(CODE, "no-such-language")
    qtbot.addWidget(python)
    qtbot.addWidget(plain)

    assert python.highlighted and python.language.text() == "Python"
    keyword, comment, name = (colour_at(python, w) for w in ("def", "# the", "add"))
    assert keyword.isValid() and comment.isValid()
    assert len({keyword.name(), comment.name(), name.name()}) == 3
    # After an emoji (two UTF-16 units) the colours still line up with the text.
    assert colour_at(python, "# 🙂") == comment and colour_at(python, "done") == comment
    assert not plain.highlighted and plain.language.text() == "no-such-language"
    assert python.view.document().toPlainText() == CODE  # colours change no character


def test_colours_follow_the_theme(qtbot):
    app = QApplication.instance()
    original = app.palette()
    block = CodeBlock(CODE, "python")
    qtbot.addWidget(block)
    light = colour_at(block, "def")
    try:
        app.setPalette(theme.dark_palette())
        qtbot.waitUntil(lambda: colour_at(block, "def") != light, timeout=3_000)
        assert colour_at(block, "def").lightness() > light.lightness()  # readable on the dark card
    finally:
        app.setPalette(original)


def test_a_code_block_appears_as_its_fence_streams_in_and_is_coloured_while_streaming(qtbot):
    body = MessageBody()
    qtbot.addWidget(body)
    body.set_content("", [], streaming=True, colours=False)
    body.append([Token("Here is the function:\n", "target", 0)])
    prose = body._pane
    body.append([Token("```py", "target", 1)])
    body.append([Token("thon\n", "draft", 2)])
    [block] = body.findChildren(CodeBlock)
    assert block.language.text() == "Python" and block.copy_button.isVisibleTo(body)
    for i, piece in enumerate(["def add(a, b):\n", "    return a + b\n"]):
        body.append([Token(piece, "target", 3 + i)])
    assert body.findChildren(CodeBlock) == [block]  # the same block grows; nothing is rebuilt
    body.append([Token("```\nDone.", "target", 9)])
    assert block.code == "def add(a, b):\n    return a + b" and block.highlighted
    assert colour_at(block, "def").isValid()
    assert prose in body.findChildren(TextPane) and not prose.isHidden()  # the prose before it was kept
    assert body._pane is not prose and "Done." in body._pane.toPlainText()

    body.finish(body.text, body.tokens)
    [final] = [b for b in body.findChildren(CodeBlock) if not b.isHidden()]  # the old ones go on the next loop
    assert final.code == block.code and final.highlighted


def test_long_lines_scroll_inside_the_block_instead_of_widening_the_message(qtbot):
    body = MessageBody()
    body.resize(420, 300)
    qtbot.addWidget(body)
    body.set_content("Wide:\n```python\nx = '" + "a" * 400 + "'\n```", [], streaming=False, colours=False)
    body.show()
    [block] = body.findChildren(CodeBlock)
    qtbot.waitUntil(lambda: block.view.horizontalScrollBar().maximum() > 0, timeout=3_000)
    assert block.width() <= body.width()
    assert QGuiApplication.palette() is not None


def test_code_is_given_more_width_than_prose(qtbot):
    body = MessageBody()
    em = body.fontMetrics().horizontalAdvance("M")
    body.resize(PROSE_MAX_EM * em + 400, 400)
    qtbot.addWidget(body)
    prose = "A sentence long enough to wrap. " * 40
    body.set_content(prose + "\n```python\nx = '" + "a" * 400 + "'\n```\n" + prose, [], streaming=False, colours=False)
    body.show()
    [block] = body.findChildren(CodeBlock)
    panes = [p for p in body.findChildren(TextPane) if not block.isAncestorOf(p)]
    qtbot.waitUntil(lambda: block.width() >= body.width() - 2, timeout=3_000)
    assert len(panes) == 2
    for pane in panes:  # a readable line length, from the left edge
        assert pane.width() <= PROSE_MAX_EM * em and pane.x() == 0
    assert block.width() > max(pane.width() for pane in panes) + 300
    # In a narrow message, both take the width there is.
    body.resize(500, 400)
    qtbot.waitUntil(lambda: block.width() <= 500 and all(p.width() >= 480 for p in panes), timeout=3_000)


def test_an_answer_that_starts_with_a_code_fence_streams_without_losing_its_panes(qtbot):
    # The empty prose pane shown before the first token gives way to a code block: the pane must
    # leave the body's list of segments too, or the next token is appended to a deleted pane.
    body = MessageBody()
    qtbot.addWidget(body)
    body.set_content("", [], streaming=True, colours=False)
    body.show()
    pieces = ["```", "python\n", "print(1)\n", "```\n", "Done", " now."]
    for i, piece in enumerate(pieces):
        body.append([Token(piece, "target", i)])
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # as the event loop between tokens
    body.finish("".join(pieces), [])
    QApplication.sendPostedEvents(
        None, QEvent.Type.DeferredDelete
    )  # and the finished answer renders from scratch without a dead pane
    [block] = body.findChildren(CodeBlock)
    qtbot.waitUntil(block.isVisible, timeout=3_000)
    assert "print(1)" in block.view.toPlainText()
    panes = [p for p in body.findChildren(TextPane) if p.isVisible() and not block.isAncestorOf(p)]
    assert [p.toPlainText() for p in panes] == ["Done now."]
