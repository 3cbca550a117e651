"""Attached files as chips: a name and size, with an × to remove one while the message is being written."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QStyle, QToolButton, QWidget

from app.core.attachments import Attachment
from app.ui.flow_layout import FlowLayout


class Chip(QFrame):
    remove_requested = Signal()

    def __init__(self, attachment: Attachment, removable: bool, parent: QWidget | None = None):
        super().__init__(parent)
        self.attachment = attachment
        self.setObjectName("attachmentChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 1, 2 if removable else 6, 1)
        layout.setSpacing(2)
        icon = QLabel()
        size = self.fontMetrics().height()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon).pixmap(size, size))
        layout.addWidget(icon)
        self.label = QLabel(attachment.label())
        lines = attachment.text.count("\n") + 1
        self.setToolTip(
            f"{attachment.name}: {lines:,} lines, {len(attachment.text):,} characters, quoted into the prompt"
        )
        layout.addWidget(self.label)
        self.remove_button: QToolButton | None = None
        if removable:
            self.remove_button = QToolButton()
            self.remove_button.setText("×")
            self.remove_button.setAutoRaise(True)
            self.remove_button.setToolTip(f"Remove {attachment.name} from this message")
            self.remove_button.setAccessibleName(f"Remove {attachment.name}")
            self.remove_button.clicked.connect(self.remove_requested)
            layout.addWidget(self.remove_button)


class AttachmentChips(QWidget):
    """A wrapping row of chips; hidden while there are none."""

    remove_requested = Signal(int)  # index of the attachment

    def __init__(self, attachments: list[Attachment] = (), removable: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.removable = removable
        self.flow = FlowLayout(self, h_spacing=6, v_spacing=4)
        self.chips: list[Chip] = []
        self.set_attachments(list(attachments))

    def set_attachments(self, attachments: list[Attachment]) -> None:
        for chip in self.chips:
            self.flow.removeWidget(chip)
            chip.hide()  # at once: deleteLater waits for the event loop
            chip.deleteLater()
        self.chips = []
        for index, attachment in enumerate(attachments):
            chip = Chip(attachment, self.removable, self)
            chip.remove_requested.connect(lambda i=index: self.remove_requested.emit(i))
            self.flow.addWidget(chip)
            self.chips.append(chip)
        self.setVisible(bool(attachments))
        self.updateGeometry()
