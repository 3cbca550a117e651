"""The "Local server" window: the switch (port, optional API key) and the request log of
app.bridge.local_server's LocalServerController; ServerStatusLabel is the status bar's line while it runs.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.bridge.local_server import LocalServerController
from engine.serving.config import DEFAULT_PORT
from engine.serving.request_log import RequestRecord

LOG_LINES = 500  # the log view keeps the newest lines


class ServerStatusLabel(QLabel):
    """The status bar's line while the server runs (hidden otherwise)."""

    def __init__(self, controller: LocalServerController, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Local server status")
        self.setToolTip("Other programs on this computer can use the loaded model here (File → Local server…)")
        controller.status_changed.connect(self._show)
        self._show(controller.status_text())

    @Slot(str)
    def _show(self, text: str) -> None:
        self.setText(text)
        self.setVisible(bool(text))


class ServerPanel(QDialog):
    """The switch, its port and key, where to point a client, and the requests as they finish."""

    def __init__(self, controller: LocalServerController, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = controller
        self.setWindowTitle("Local server")
        self.switch = QCheckBox("&Serve the loaded model to programs on this computer")
        self.switch.setToolTip("An OpenAI-compatible server on 127.0.0.1: editors, scripts and agents can use it")
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("any free port")
        self.port.setValue(DEFAULT_PORT)
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("none: any program on this computer may use it")
        self.where = QLabel()
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy = QPushButton("&Copy URL")
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(controller.url))
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_LINES)
        self.log_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log_view.setPlaceholderText("Requests appear here as they finish.")
        self.log_view.setAccessibleName("Request log")

        form = QFormLayout()
        form.addRow("&Port:", self.port)
        form.addRow("API &key:", self.key)
        row = QHBoxLayout()
        row.addWidget(self.where, 1)
        row.addWidget(self.copy)
        layout = QVBoxLayout(self)
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addLayout(row)
        layout.addWidget(QLabel("Requests:"))
        layout.addWidget(self.log_view, 1)
        self.resize(self.fontMetrics().horizontalAdvance("M") * 60, self.fontMetrics().height() * 24)

        self.switch.toggled.connect(self._switched)
        controller.running_changed.connect(self._show_state)
        controller.request_logged.connect(self._append)
        if controller.log is not None:
            for record in controller.log.records():
                if record.finished:
                    self._append(record)
        self._show_state(controller.running)

    @Slot(bool)
    def _switched(self, on: bool) -> None:
        if on == self.controller.running:
            return
        if not on:
            self.controller.stop()
            return
        try:
            self.controller.start(self.port.value(), self.key.text().strip() or None)
        except OSError as e:
            self._show_state(False)
            self.where.setText(f"Could not start the server on port {self.port.value()}: {e}")

    @Slot(bool)
    def _show_state(self, running: bool) -> None:
        self.switch.blockSignals(True)
        self.switch.setChecked(running)
        self.switch.blockSignals(False)
        self.port.setEnabled(not running)
        self.key.setEnabled(not running)
        self.copy.setEnabled(running)
        if running:
            key = "with the API key above" if self.key.text().strip() else "with any API key"
            self.where.setText(
                f"Base URL: <b>{self.controller.url}</b> ({key}). Only this computer can reach it (127.0.0.1)."
            )
        else:
            self.where.setText("Off. When on, it listens on 127.0.0.1 only: other computers cannot reach it.")

    @Slot(object)
    def _append(self, record: RequestRecord) -> None:
        self.log_view.appendPlainText(record.line())
