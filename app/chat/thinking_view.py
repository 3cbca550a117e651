"""A reasoning model's thinking, above its answer: open while it thinks, collapsed once it answers.

The header says how long the thinking took and how many tokens it was; a click opens or closes
it. The text is drawn at most once per frame (the answer's own text is batched the same way).
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QToolButton, QVBoxLayout, QWidget

from app.ui import theme

FRAME_MS = 16


class ThinkingSection(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setAutoRaise(True)
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setToolTip("The model's reasoning before its answer. Click to show or hide it.")
        self.toggle.toggled.connect(self._set_open)
        layout.addWidget(self.toggle)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        em = self.fontMetrics().height()
        self.label.setContentsMargins(em, 0, 0, em // 2)
        theme.tint(self.label)
        layout.addWidget(self.label)
        self.text = ""
        self.thinking = False  # still being written
        self.n_pieces = 0  # pieces appended while streaming (about one per token)
        self._t_start = 0.0
        self.summary = ""
        self._redraw = QTimer(self)
        self._redraw.setSingleShot(True)
        self._redraw.setInterval(FRAME_MS)
        self._redraw.timeout.connect(lambda: self.label.setText(self.text.strip()))
        self._set_open(False)

    @property
    def collapsed(self) -> bool:
        return not self.toggle.isChecked()

    def start(self, text: str = "") -> None:
        """Thinking streams in: shown open."""
        self.thinking = True
        self._t_start = time.perf_counter()
        self.text = text
        self.label.setText(text.strip())
        self.toggle.setChecked(True)
        self._update_header()

    def append(self, text: str) -> None:
        if not self.thinking:
            self.start(self.text)
        self.text += text
        self.n_pieces += 1
        if not self._redraw.isActive():
            self._redraw.start()

    def end_live(self) -> None:
        """The answer began while streaming: collapse, with what the thinking took so far as seen here."""
        if self.thinking:
            self.finish(self.text, self.n_pieces, time.perf_counter() - self._t_start)

    def finish(self, text: str, n_tokens: int = 0, seconds: float = 0.0, collapse: bool = True) -> None:
        """The thinking is complete (or the message is shown afterwards): collapsed, with what it took."""
        self._redraw.stop()
        self.thinking = False
        self.text = text
        self.label.setText(text.strip())
        parts = [f"{seconds:.1f} s" if seconds else "", f"{n_tokens:,} tokens" if n_tokens else ""]
        self.summary = " · ".join(p for p in parts if p)
        if collapse:
            self.toggle.setChecked(False)
        self._update_header()

    def _set_open(self, open_: bool) -> None:
        self.label.setVisible(open_)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)

    def _update_header(self) -> None:
        if self.thinking:
            self.toggle.setText("Thinking…")
        else:
            self.toggle.setText(f"Thought for {self.summary}" if self.summary else "Thinking")
