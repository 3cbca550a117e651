"""The input box: Enter sends, Shift+Enter starts a new line, Up in an empty box edits the last message."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import theme

MAX_LINES = 8


class ChatInput(QPlainTextEdit):
    submitted = Signal()
    edit_last_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setPlaceholderText("Message Specula  (Enter sends · Shift+Enter new line · Esc stops)")
        self.setTabChangesFocus(True)
        self.setAccessibleName("Message")
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, event) -> None:
        key, mods = event.key(), event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            elif not mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier):
                self.submitted.emit()
            else:
                super().keyPressEvent(event)
            return
        if key == Qt.Key.Key_Up and not self.toPlainText():
            self.edit_last_requested.emit()
            return
        super().keyPressEvent(event)

    def _fit(self, *_args) -> None:
        """As tall as its text, from one line up to MAX_LINES (then it scrolls)."""
        lines, block = 0, self.document().begin()
        while block.isValid():
            lines += max(block.layout().lineCount(), 1)
            block = block.next()
        lines = max(1, min(MAX_LINES, lines))
        margins = self.contentsMargins()
        height = (
            lines * self.fontMetrics().lineSpacing()
            + 2 * self.document().documentMargin()
            + margins.top()
            + margins.bottom()
            + 2 * self.frameWidth()
        )
        self.setFixedHeight(int(height))


class Composer(QFrame):
    """Input box, Send/Stop button, and the banner shown while editing the last message."""

    send_requested = Signal(str)
    stop_requested = Signal()
    edit_last_requested = Signal()
    edit_cancelled = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.busy = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 6, 12, 10)
        layout.setSpacing(4)
        self.banner = QWidget()
        banner = QHBoxLayout(self.banner)
        banner.setContentsMargins(0, 0, 0, 0)
        self.banner_label = QLabel("Editing your last message: Enter sends it again and replaces the answer.")
        banner.addWidget(self.banner_label, 1)
        cancel = QToolButton()
        cancel.setText("Cancel")
        cancel.setToolTip("Stop editing (Esc)")
        cancel.clicked.connect(self.cancel_edit)
        banner.addWidget(cancel)
        self.banner.setVisible(False)
        layout.addWidget(self.banner)
        row = QHBoxLayout()
        self.input = ChatInput(self)
        self.input.submitted.connect(self._submit)
        self.input.edit_last_requested.connect(self.edit_last_requested)
        row.addWidget(self.input, 1)
        self.button = QPushButton("Send")
        self.button.setToolTip("Send the message (Enter)")
        self.button.setDefault(False)
        self.button.setAutoDefault(False)
        self.button.clicked.connect(self._button_clicked)
        row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(row)
        self.editing_id: int | None = None
        theme.tint(self.banner_label)

    def text(self) -> str:
        return self.input.toPlainText()

    def set_text(self, text: str) -> None:
        self.input.setPlainText(text)
        cursor = self.input.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.input.setTextCursor(cursor)

    def clear(self) -> None:
        self.input.clear()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.button.setText("Stop" if busy else "Send")
        self.button.setToolTip("Stop the answer (Esc)" if busy else "Send the message (Enter)")

    def start_edit(self, message_id: int, text: str) -> None:
        self.editing_id = message_id
        self.set_text(text)
        self.banner.setVisible(True)
        self.input.setFocus()

    def cancel_edit(self) -> None:
        if self.editing_id is not None:
            self.editing_id = None
            self.banner.setVisible(False)
            self.clear()
            self.edit_cancelled.emit()

    def end_edit(self) -> None:
        self.editing_id = None
        self.banner.setVisible(False)

    def _submit(self) -> None:
        if self.busy:
            return  # Enter while an answer streams does nothing; Esc or Stop stops it
        text = self.text()
        if text.strip():
            self.send_requested.emit(text)

    def _button_clicked(self) -> None:
        if self.busy:
            self.stop_requested.emit()
        else:
            self._submit()
