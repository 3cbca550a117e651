"""Asked once per chat and remote engine before any passage of the user's documents leaves this computer.

Non-modal (the window goes on): `decided` says whether the user allowed it. Closing it is a No, so
nothing is sent without a click on Send passages.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMessageBox, QWidget


class RemotePassagesDialog(QMessageBox):
    decided = Signal(bool)  # True: the user allowed the passages to go to the engine

    def __init__(
        self, engine_name: str, host: str, collections: list[str], budget_chars: int, parent: QWidget | None = None
    ):
        """budget_chars: how much of the passages found goes with each question, at most."""
        super().__init__(parent)
        self.setIcon(QMessageBox.Icon.Question)
        self.setWindowTitle("Send passages to a remote engine?")
        where = f"<b>{html.escape(engine_name)}</b> ({html.escape(host)})"
        which = ", ".join(html.escape(c) for c in collections) or "the collections you tick"
        self.setText(f"Send passages from your documents to {where}?")
        self.setInformativeText(
            f"This chat is answered by {where}. From now on, the passages found in {which} for each "
            f"question of this chat (up to about {budget_chars:,} characters) go to that server with the question, "
            "and it sees them as you would. Your files and the rest of their text stay on this computer. "
            "Untick “Send passages to …” in the Documents menu to stop."
        )
        self.send_button = self.addButton("Send passages", QMessageBox.ButtonRole.AcceptRole)
        self.keep_button = self.addButton("Keep them here", QMessageBox.ButtonRole.RejectRole)
        self.setDefaultButton(self.keep_button)
        self.setEscapeButton(self.keep_button)
        self.finished.connect(lambda _result: self.decided.emit(self.clickedButton() is self.send_button))
