"""Asked before every tool call: which tool, on which server, with exactly which arguments.

Non-modal and signal-driven: the window shows it and goes on (the answer waits, the GUI never does);
`decided` carries the user's choice. Closing it is a Deny. The arguments are shown in full, as pretty
JSON in a scrollable box: what the model asks to do is never cut short.
"""

from __future__ import annotations

import html
import json

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.tool_steps import ToolUse

ALLOW_ONCE, ALWAYS, DENY = "once", "always", "deny"


class ToolApprovalDialog(QDialog):
    decided = Signal(str, str)  # the call's id, ALLOW_ONCE / ALWAYS / DENY

    def __init__(self, use: ToolUse, description: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.use = use
        self._answered = False
        self.setWindowTitle(f"Allow {use.name}?")
        layout = QVBoxLayout(self)
        title = QLabel(
            f"The model asks to run <b>{html.escape(use.name)}</b> on the MCP server <b>{html.escape(use.server)}</b>."
        )
        title.setWordWrap(True)
        layout.addWidget(title)
        if description:
            about = QLabel(description)
            about.setWordWrap(True)
            about.setTextFormat(Qt.TextFormat.PlainText)
            layout.addWidget(about)
        layout.addWidget(QLabel("With these arguments:"))
        self.arguments = QPlainTextEdit(json.dumps(use.arguments, indent=2, ensure_ascii=False))
        self.arguments.setReadOnly(True)
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.arguments.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        layout.addWidget(self.arguments, 1)
        buttons = QHBoxLayout()
        self.deny_button = QPushButton("Deny")
        self.always_button = QPushButton("Always allow this tool in this chat")
        self.once_button = QPushButton("Allow once")
        self.once_button.setDefault(True)
        buttons.addWidget(self.deny_button)
        buttons.addStretch(1)
        buttons.addWidget(self.always_button)
        buttons.addWidget(self.once_button)
        layout.addLayout(buttons)
        self.deny_button.clicked.connect(lambda: self._answer(DENY))
        self.always_button.clicked.connect(lambda: self._answer(ALWAYS))
        self.once_button.clicked.connect(lambda: self._answer(ALLOW_ONCE))
        em = self.fontMetrics().horizontalAdvance("M")
        self.resize(em * 40, self.fontMetrics().height() * 20)

    def _answer(self, decision: str) -> None:
        if not self._answered:
            self._answered = True
            self.decided.emit(self.use.id, decision)
        super().done(QDialog.DialogCode.Accepted if decision != DENY else QDialog.DialogCode.Rejected)

    def withdraw(self) -> None:
        """The answer ended meanwhile (Stop): close without a decision."""
        self._answered = True
        super().reject()

    def reject(self) -> None:
        """Esc or the title bar's close (QDialog.closeEvent comes here): nothing runs unasked."""
        self._answer(DENY)


class ToolApprovals(QObject):
    """Shows a ToolApprovalDialog for each call the answer controller asks about, and hands back the
    choice; closes it if the answer ends first. dialog: the one open now (tests click its buttons)."""

    def __init__(self, answers, mcp, parent: QWidget):
        super().__init__(parent)
        self.answers, self.mcp, self.window = answers, mcp, parent
        self.dialog: ToolApprovalDialog | None = None
        answers.approval_needed.connect(self._ask)
        answers.approval_withdrawn.connect(self._withdraw)

    def _ask(self, request) -> None:
        use = request.use
        description = next((t.spec.description for t in self.mcp.tools([use.server]) if t.spec.name == use.name), "")
        self.dialog = ToolApprovalDialog(use, description, self.window)
        self.dialog.decided.connect(self._decided)
        self.dialog.show()
        self.dialog.raise_()

    def _decided(self, use_id: str, decision: str) -> None:
        self.dialog = None
        self.answers.decide(use_id, decision)

    def _withdraw(self, _message_id: int) -> None:
        if self.dialog is not None:
            dialog, self.dialog = self.dialog, None
            dialog.withdraw()
