"""A message's text on screen: streamed in, rendered as Markdown, or coloured token by token.

MessageBody has three ways to show a text:
- streaming: prose panes and code blocks as the text so far splits into them; new tokens are
  appended to the last one with a QTextCursor, and the Markdown is re-rendered at most
  RERENDER_S apart (never per token), only the parts that changed; a code fence as it arrives
  re-renders at once, so a code block shows its frame, language and Copy button from its first line;
- finished: Markdown, with each fenced code block in its own monospace CodeBlock that has a
  Copy button and syntax colours (app/chat/code_highlight.py);
- token colours: the raw text with each token's background showing its source, and a
  tooltip per token.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, Qt, QTimer
from PySide6.QtGui import (
    QGuiApplication,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QTextBrowser,
    QTextEdit,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.chat.code_highlight import highlight, language_label
from app.core.store import Token
from app.ui import theme

PROSE_MAX_EM = 60  # a readable line length; code blocks may be wider (the chat column's width)
RERENDER_S = 0.3  # shortest Markdown re-render interval while streaming (longer for long answers)
TOKEN_PROPERTY = QTextFormat.Property.UserProperty + 1  # token index stored in each token's format
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")


@dataclass
class Segment:
    kind: str  # "markdown" | "code"
    text: str
    language: str = ""
    closed: bool = True  # a code block whose closing fence has not arrived yet is open


def split_markdown(text: str) -> list[Segment]:
    """Split Markdown into prose and fenced code blocks (``` or ~~~, CommonMark's closing rule)."""
    segments: list[Segment] = []
    prose: list[str] = []
    code: list[str] = []
    fence, language = "", ""
    for line in text.split("\n"):
        if not fence:
            m = _FENCE.match(line)
            if m:
                if prose:
                    segments.append(Segment("markdown", "\n".join(prose)))
                    prose = []
                fence, language, code = m.group(1), m.group(2), []
            else:
                prose.append(line)
        else:
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                segments.append(Segment("code", "\n".join(code), language))
                fence = ""
            else:
                code.append(line)
    if fence:
        segments.append(Segment("code", "\n".join(code), language, closed=False))
    if prose and "\n".join(prose).strip():
        segments.append(Segment("markdown", "\n".join(prose)))
    return [s for s in segments if s.kind == "code" or s.text.strip()]


def decorate_code_blocks(doc: QTextDocument, pal: QPalette) -> None:
    """Give code blocks rendered by Qt's Markdown importer a background (it sets only the font)."""
    background = theme.card(pal, 0.08)
    block = doc.begin()
    cursor = QTextCursor(doc)
    while block.isValid():
        fmt = block.blockFormat()
        if fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.nonBreakableLines():
            fmt.setBackground(background)
            cursor.setPosition(block.position())
            cursor.setBlockFormat(fmt)
        block = block.next()


def _theme_key() -> tuple:
    pal = QGuiApplication.palette()
    return tuple(pal.color(r).rgba() for r in (QPalette.ColorRole.Base, QPalette.ColorRole.Text))


class _FenceTracker:
    """Follows fenced code blocks line by line as text streams in (token-colour mode)."""

    def __init__(self):
        self.fence = ""
        self.line = ""

    @property
    def in_code(self) -> bool:
        # A fence line being written counts as code already.
        return bool(self.fence) or bool(_FENCE.match(self.line))

    def feed(self, text: str) -> None:
        self.line += text
        while "\n" in self.line:
            done, self.line = self.line.split("\n", 1)
            if not self.fence:
                m = _FENCE.match(done)
                self.fence = m.group(1) if m else ""
            else:
                stripped = done.strip()
                if stripped and set(stripped) == {self.fence[0]} and len(stripped) >= len(self.fence):
                    self.fence = ""


class TextPane(QTextBrowser):
    """A read-only text view as tall as its text: no scroll bars, the chat scrolls instead."""

    def __init__(self, parent: QWidget | None = None, wrap: bool = True):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAlwaysOff if wrap else Qt.ScrollBarPolicy.ScrollBarAsNeeded
        )
        if not wrap:
            self.setLineWrapMode(QTextEdit.LineWrapMode.NoWrap)
        self.setOpenExternalLinks(True)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
            | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(1)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.token_tooltip: Callable[[int], str] | None = None
        self._fit()

    def _fit(self, *_args) -> None:
        height = math.ceil(self.document().size().height()) + 2 * self.frameWidth()
        bar = self.horizontalScrollBar()
        if (
            self.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap
            and self.document().idealWidth() > self.viewport().width()
        ):
            height += bar.sizeHint().height()
        if self.height() != height:
            self.setFixedHeight(height)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def wheelEvent(self, event) -> None:
        # Vertical wheel scrolls the chat; sideways scrolling stays here (wide code).
        delta = event.angleDelta()
        if self.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap and abs(delta.x()) > abs(delta.y()):
            super().wheelEvent(event)
        else:
            event.ignore()

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.token_tooltip is not None:
            offset = QPointF(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
            pos = self.document().documentLayout().hitTest(QPointF(event.pos()) + offset, Qt.HitTestAccuracy.ExactHit)
            text = ""
            if pos >= 0:
                cursor = QTextCursor(self.document())
                cursor.setPosition(min(pos + 1, self.document().characterCount() - 1))
                index = cursor.charFormat().property(TOKEN_PROPERTY)
                if isinstance(index, int):
                    text = self.token_tooltip(index)
            if text:
                QToolTip.showText(event.globalPos(), text, self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)


class CodeBlock(QFrame):
    """A fenced code block: language, a Copy button, and the code in a monospace font, coloured
    when the language is known; long lines scroll sideways inside the block."""

    def __init__(self, code: str, language: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.code = code
        self.language_name = language
        self.setObjectName("codeBlock")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 2, 4, 6)
        layout.setSpacing(0)
        header = QHBoxLayout()
        self.language = QLabel(language_label(language))
        self.language.setAccessibleName("Code language")
        theme.tint(self.language)
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setAutoRaise(True)
        self.copy_button.setToolTip("Copy this code block to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        header.addWidget(self.language)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        layout.addLayout(header)
        self.view = TextPane(self, wrap=False)
        self.view.setFont(theme.monospace())
        self.view.setPlainText(code)
        layout.addWidget(self.view)
        self.highlighted = False  # whether the code has syntax colours (its language is known)
        self._coloured_for: tuple[str, str] = ("", "")
        self._restyle()

    def set_code(self, code: str, language: str) -> None:
        """While streaming: the block's code so far (usually the old code plus a few lines)."""
        if language != self.language_name:
            self.language_name = language
            self.language.setText(language_label(language))
        if code.startswith(self.code):  # append: the view keeps its sideways scroll position
            self.append_code(code[len(self.code) :])
        elif code != self.code:
            self.code = code
            self.view.setPlainText(code)
        if self._coloured_for != (self.code, self.language_name):
            self._highlight()

    def append_code(self, text: str) -> None:
        """Cheap append between re-renders: plain until the next set_code colours it."""
        if not text:
            return
        self.code += text
        cursor = QTextCursor(self.view.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, QTextCharFormat())

    def _highlight(self) -> None:
        self.highlighted = highlight(self.view.document(), self.code, self.language_name, theme.is_dark())
        self._coloured_for = (self.code, self.language_name)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")
        QTimer.singleShot(1500, self.copy_button, lambda: self.copy_button.setText("Copy"))

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and not self._restyling:
            self._restyle()

    _restyling = False

    def _restyle(self) -> None:
        self._restyling = True
        try:
            pal = self.palette()
            pal.setColor(QPalette.ColorRole.Window, theme.card(QGuiApplication.palette(), 0.07))
            self.setPalette(pal)
            self._highlight()  # colours for the new theme
        finally:
            self._restyling = False


class MessageBody(QWidget):
    """The text of one message (see the module docstring for its three modes)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self.text = ""
        self.tokens: list[Token] = []
        self.colours = False
        self.streaming = False
        self.token_tooltip: Callable[[int], str] | None = None
        self._pane: TextPane | None = None  # the pane appended to: token mode's only one, streaming's last
        self._segments: list[tuple[Segment, QWidget]] = []  # streaming: what is on screen, in order
        self._last_render = 0.0
        self._render_cost = 0.0
        self._cursor: QTextCursor | None = None
        self._fences = _FenceTracker()
        self._built_for: tuple = ()

    # -- public -------------------------------------------------------------------------------

    def set_content(self, text: str, tokens: Sequence[Token], *, streaming: bool, colours: bool) -> None:
        self.text, self.tokens = text, list(tokens)
        self.streaming, self.colours = streaming, colours
        self._rebuild()

    def set_colours(self, colours: bool) -> None:
        if colours != self.colours:
            self.colours = colours
            self._rebuild()

    def append(self, tokens: Sequence[Token]) -> None:
        """Add streamed tokens: cheap appends, with an occasional Markdown re-render."""
        if not tokens:
            return
        first = len(self.tokens)
        self.tokens.extend(tokens)
        added = "".join(t.text for t in tokens)
        self.text += added
        if self._pane is None and not self._segments:  # nothing on screen to append to yet
            self._rebuild()
            return
        if self.colours:
            self._append_tokens(tokens, first)
        elif (
            "`" in added
            or "~" in added
            or time.monotonic() - self._last_render >= max(RERENDER_S, 10 * self._render_cost)
        ):
            self._render_streaming()  # at once for a fence, so a code block gets its frame now
        elif isinstance(self._segments[-1][1], CodeBlock):
            self._segments[-1][1].append_code(added)
        else:
            self._end_cursor().insertText(added)

    def finish(self, text: str, tokens: Sequence[Token]) -> None:
        self.text, self.tokens, self.streaming = text, list(tokens), False
        self._rebuild()

    def plain_text(self) -> str:
        return self.text

    # -- rendering ----------------------------------------------------------------------------

    def _clear(self) -> None:
        while self._layout.count():
            item = self._layout.takeAt(0)
            if item.widget() is not None:
                item.widget().hide()  # off screen now, deleted when the event loop gets to it
                item.widget().deleteLater()
        self._pane = None
        self._cursor = None
        self._segments = []

    def _rebuild(self) -> None:
        self._clear()
        self._built_for = _theme_key()
        if self.colours:
            self._pane = self._new_pane(prose=False)  # the raw text, code included: the whole width
            self._pane.token_tooltip = self.token_tooltip
            self._append_tokens(self.tokens, 0)
        elif self.streaming:
            self._render_streaming()
        else:
            for segment in split_markdown(self.text) or [Segment("markdown", "")]:
                self._add_segment(segment)

    def _add_segment(self, segment: Segment) -> QWidget:
        if segment.kind == "code":
            block = CodeBlock(segment.text, segment.language, self)
            self._layout.addWidget(block)
            return block
        pane = self._new_pane()
        self._set_markdown(pane, segment.text)
        return pane

    def _set_markdown(self, pane: TextPane, text: str) -> None:
        pane.document().setMarkdown(text, MARKDOWN)
        decorate_code_blocks(pane.document(), self.palette())

    def _new_pane(self, prose: bool = True) -> TextPane:
        pane = TextPane(self)
        if prose:  # capped, it stays at the left edge; code blocks take the whole width
            pane.setMaximumWidth(PROSE_MAX_EM * self.fontMetrics().horizontalAdvance("M"))
        self._layout.addWidget(pane)
        return pane

    def _render_streaming(self) -> None:
        """Show the text so far as prose panes and code blocks, re-rendering only the parts that changed."""
        t0 = time.monotonic()
        segments = split_markdown(self.text) or [Segment("markdown", "")]
        kept = 0
        while kept < min(len(segments), len(self._segments)) and segments[kept].kind == self._segments[kept][0].kind:
            kept += 1
        for _segment, widget in self._segments[kept:]:
            self._layout.removeWidget(widget)
            widget.hide()
            widget.deleteLater()
        del self._segments[kept:]  # gone from the list too: the loop below appends after what is kept
        for i, segment in enumerate(segments):
            if i >= kept:
                self._segments.append((segment, self._add_segment(segment)))
                continue
            old, widget = self._segments[i]
            if old != segment:
                if isinstance(widget, CodeBlock):
                    widget.set_code(segment.text, segment.language)
                else:
                    self._set_markdown(widget, segment.text)
                self._segments[i] = (segment, widget)
        del self._segments[len(segments) :]
        last = self._segments[-1][1]
        self._pane = last if isinstance(last, TextPane) else None
        self._cursor = None
        self._last_render = time.monotonic()
        # Long answers re-render less often: at most a tenth of the time goes to re-rendering.
        self._render_cost = self._last_render - t0

    def _end_cursor(self) -> QTextCursor:
        if self._cursor is None:
            self._cursor = QTextCursor(self._pane.document())
        self._cursor.movePosition(QTextCursor.MoveOperation.End)
        return self._cursor

    def _append_tokens(self, tokens: Sequence[Token], first: int) -> None:
        """Insert tokens with their source's background; lines inside code fences in monospace."""
        if first == 0:
            self._fences = _FenceTracker()
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        pal = self.palette()
        formats: dict[tuple[str, bool], QTextCharFormat] = {}
        mono = [theme.monospace().family()]
        for i, token in enumerate(tokens):
            if not token.text:
                continue
            key = (token.source, self._fences.in_code)
            fmt = formats.get(key)
            if fmt is None:
                fmt = QTextCharFormat()
                background = theme.token_background(token.source, pal)
                if background is not None:
                    fmt.setBackground(background)
                if key[1]:
                    fmt.setFontFamilies(mono)
                formats[key] = fmt
            fmt = QTextCharFormat(fmt)
            fmt.setProperty(TOKEN_PROPERTY, first + i)
            cursor.insertText(token.text, fmt)
            self._fences.feed(token.text)
        cursor.endEditBlock()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        # Rebuild only when the theme really changed (a parent restyling itself changes no text colour).
        if event.type() == QEvent.Type.PaletteChange and self._built_for != _theme_key():
            self._rebuild()
