"""The input box: Enter sends, Shift+Enter starts a new line, Up in an empty box edits the last message.

Files are attached with the Attach button or by dropping (or pasting) them on the composer; they show
as removable chips until the message is sent. The context meter sits under the box.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QMimeData, Qt, Signal
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

from app.chat.attachment_chips import AttachmentChips
from app.chat.context_meter import ContextMeter
from app.chat.documents_button import DocumentsButton
from app.chat.tools_button import ToolsButton
from app.core import attachments as files
from app.core.attachments import Attachment, AttachmentError
from app.ui import file_dialogs, theme

MAX_LINES = 8


def local_files(mime: QMimeData) -> list[str]:
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


class ChatInput(QPlainTextEdit):
    submitted = Signal()
    edit_last_requested = Signal()
    files_dropped = Signal(list)  # local paths dropped or pasted on the box: attach them, not their names

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

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if paths := local_files(source):
            self.files_dropped.emit(paths)
        else:
            super().insertFromMimeData(source)

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
    """Input box, Send/Stop button, attachment chips, the context meter, and the banner shown while editing."""

    send_requested = Signal(str)
    draft_changed = Signal()  # the text or the attachments changed (the context meter counts again)
    stop_requested = Signal()
    edit_last_requested = Signal()
    edit_cancelled = Signal()
    folders_dropped = Signal(list)  # folders dropped on the box: added to the documents, used by this chat

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.busy = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 6, 12, 10)
        layout.setSpacing(4)
        self.banner = QWidget()
        banner = QHBoxLayout(self.banner)
        banner.setContentsMargins(0, 0, 0, 0)
        self.banner_label = QLabel()  # start_edit says what sending will replace
        banner.addWidget(self.banner_label, 1)
        cancel = QToolButton()
        cancel.setText("Cancel")
        cancel.setToolTip("Stop editing (Esc)")
        cancel.clicked.connect(self.cancel_edit)
        banner.addWidget(cancel)
        self.banner.setVisible(False)
        layout.addWidget(self.banner)
        self.attachments: list[Attachment] = []
        self.chips = AttachmentChips(removable=True)
        self.chips.remove_requested.connect(self.remove_attachment)
        layout.addWidget(self.chips)
        self.meter = ContextMeter()
        layout.addWidget(self.meter.warning)
        row = QHBoxLayout()
        self.input = ChatInput(self)
        self.input.submitted.connect(self._submit)
        self.input.edit_last_requested.connect(self.edit_last_requested)
        self.input.files_dropped.connect(self.take_paths)
        self.input.textChanged.connect(self.draft_changed)
        row.addWidget(self.input, 1)
        self.button = QPushButton("Send")
        self.button.setToolTip("Send the message (Enter)")
        self.button.setDefault(False)
        self.button.setAutoDefault(False)
        self.button.clicked.connect(self._button_clicked)
        row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(row)
        under = QHBoxLayout()
        under.setSpacing(8)
        self.attach_button = QToolButton()
        self.attach_button.setText("Attach…")
        self.attach_button.setAutoRaise(True)
        self.attach_button.setToolTip(
            "Attach text, code, PDF, Word, OpenDocument or e-book files: they are quoted into the message "
            "(or drop files on the box)"
        )
        self.attach_button.clicked.connect(self.choose_files)
        under.addWidget(self.attach_button)
        self.documents_button = DocumentsButton()  # the window fills its menu with the collections
        under.addWidget(self.documents_button)
        self.tools_button = ToolsButton()  # the window fills its menu with the MCP servers
        under.addWidget(self.tools_button)
        self.chat_settings_button = QToolButton()  # the window opens This chat's dialog
        self.chat_settings_button.setText("This chat")
        self.chat_settings_button.setAutoRaise(True)
        under.addWidget(self.chat_settings_button)
        self.refusal = QLabel()  # why a file was not attached; the text typed stays
        self.refusal.setWordWrap(True)
        self.refusal.setVisible(False)
        theme.tint(self.refusal, theme.error_colour)
        under.addWidget(self.refusal, 1)
        under.addStretch(0)
        under.addWidget(self.meter)
        layout.addLayout(under)
        self.setAcceptDrops(True)
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
        self.set_attachments([])

    # -- attachments ----------------------------------------------------------------------------

    def choose_files(self) -> None:
        paths = file_dialogs.open_files(
            self,
            "Attach files",
            "Text, code and document files (*);;PDF files (*.pdf);;Word, OpenDocument and e-book files (*.docx *.odt *.epub)"
            ";;PowerPoint and Excel files (*.pptx *.xlsx);;Jupyter notebooks (*.ipynb)",
        )
        self.attach_files(paths)

    def attach_files(self, paths: list[str]) -> list[str]:
        """Read and attach each file; those refused are named, with why, under the box. Returns the refusals."""
        refused = []
        added = list(self.attachments)
        for path in paths:
            try:
                added.append(files.read(path))
            except AttachmentError as e:
                refused.append(str(e))
        self.set_attachments(added)
        self.refusal.setText("\n".join(refused))
        self.refusal.setVisible(bool(refused))
        return refused

    def remove_attachment(self, index: int) -> None:
        if 0 <= index < len(self.attachments):
            self.set_attachments(self.attachments[:index] + self.attachments[index + 1 :])

    def set_attachments(self, attachments: list[Attachment]) -> None:
        self.attachments = list(attachments)
        self.chips.set_attachments(self.attachments)
        if not attachments:
            self.refusal.setVisible(False)
        self.draft_changed.emit()

    def dragEnterEvent(self, event) -> None:
        if local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        if paths := local_files(event.mimeData()):
            event.acceptProposedAction()
            self.take_paths(paths)

    def take_paths(self, paths: list[str]) -> None:
        """Dropped or pasted: files are attached; a folder, too big to attach, becomes documents the chat searches."""
        folders = [p for p in paths if os.path.isdir(p)]
        if folders:
            self.folders_dropped.emit(folders)
        if files_only := [p for p in paths if p not in folders]:
            self.attach_files(files_only)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.button.setText("Stop" if busy else "Send")
        self.button.setToolTip("Stop the answer (Esc)" if busy else "Send the message (Enter)")

    def start_edit(self, message_id: int, text: str, attachments: list[Attachment] = (), later: int = 1) -> None:
        """Edit a sent message; later: how many messages follow it (sending again replaces them)."""
        self.editing_id = message_id
        if later <= 1:
            what = "replaces the answer" if later == 1 else "answers it"
            self.banner_label.setText(f"Editing your message: Enter sends it again and {what}.")
        else:
            self.banner_label.setText(
                f"Editing an earlier message: Enter sends it again and replaces the {later} messages after it."
            )
        self.set_text(text)
        self.set_attachments(list(attachments))
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
        if text.strip() or self.attachments:
            self.send_requested.emit(text)

    def _button_clicked(self) -> None:
        if self.busy:
            self.stop_requested.emit()
        else:
            self._submit()
