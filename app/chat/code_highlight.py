"""Syntax colours for code blocks, from Pygments (its lexers know some 500 languages by name).

A block is coloured when its fence names a language Pygments knows ("```python", "```sh");
unnamed or unknown blocks stay plain monospace: guessing the language from a few streamed
lines picks wrong colours more often than none. Colours follow the theme: Pygments' "default"
style on light palettes, "github-dark" on dark ones; plain text keeps the palette's colour.
"""

from __future__ import annotations

from functools import lru_cache

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor, QTextDocument

LIGHT_STYLE, DARK_STYLE = "default", "github-dark"


@lru_cache(maxsize=64)
def lexer_for(language: str) -> Lexer | None:
    """Pygments' lexer for a fence's language name or alias, None when it names none."""
    name = language.strip().lower()
    if not name:
        return None
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def language_label(language: str) -> str:
    """The name to show above a block: Pygments' name for a known language ("Python" for "py")."""
    lexer = lexer_for(language)
    return lexer.name if lexer is not None else (language or "code")


@lru_cache(maxsize=512)
def _format(style_name: str, token_type: _TokenType) -> QTextCharFormat | None:
    style = get_style_by_name(style_name).style_for_token(token_type)
    if not (style["color"] or style["bold"] or style["italic"]):
        return None
    fmt = QTextCharFormat()
    if style["color"]:
        fmt.setForeground(QColor(f"#{style['color']}"))
    if style["bold"]:
        fmt.setFontWeight(QFont.Weight.Bold)
    if style["italic"]:
        fmt.setFontItalic(True)
    return fmt


def highlight(doc: QTextDocument, code: str, language: str, dark: bool) -> bool:
    """Colour doc, whose plain text is code, as language; False (nothing done) for an unknown one."""
    lexer = lexer_for(language)
    if lexer is None:
        return False
    style_name = DARK_STYLE if dark else LIGHT_STYLE
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    cursor.select(QTextCursor.SelectionType.Document)
    cursor.setCharFormat(QTextCharFormat())  # a re-colouring starts from plain text
    position = 0  # in UTF-16 code units, as QTextDocument counts (an emoji is two)
    for _index, token_type, value in lexer.get_tokens_unprocessed(code):
        length = len(value.encode("utf-16-le")) // 2
        fmt = _format(style_name, token_type)
        if fmt is not None and length:
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)
        position += length
    cursor.endEditBlock()
    return True
