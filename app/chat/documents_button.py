"""The Documents button beside Attach…: which of the user's document collections this chat answers from.

A menu of the collections, ticked for those the chat uses (none by default), and Manage documents….
The button names the chosen ones, so what the next answer will search is always in view.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

MAX_NAMES_SHOWN = 24  # characters of chosen names on the button; the tooltip has them all


class DocumentsButton(QToolButton):
    collections_chosen = Signal(list)  # the collections this chat answers from, after a tick
    manage_documents = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setMenu(QMenu(self))
        self.set_collections([], [])

    def set_collections(self, names: list[str], chosen: list[str]) -> None:
        """The collections there are, and those this chat uses (ticked, and named on the button)."""
        menu = self.menu()
        menu.clear()
        for name in names:
            act = menu.addAction(name)
            act.setCheckable(True)
            act.setChecked(name in chosen)
            act.toggled.connect(lambda on, name=name: self._toggle(name, on, chosen))
        if not names:
            menu.addAction("No collections yet").setEnabled(False)
        menu.addSeparator()
        menu.addAction("Manage documents…", self.manage_documents.emit)
        used = [n for n in chosen if n in names]
        shown = ", ".join(used)
        if len(shown) > MAX_NAMES_SHOWN:
            shown = shown[: MAX_NAMES_SHOWN - 1].rstrip(", ") + "…"
        self.setText("Documents" if not used else f"Documents: {shown}")
        self.setToolTip(
            "Answer from your own documents: this chat searches the collections ticked here and cites what it uses"
            + (f" (now: {', '.join(used)})" if used else " (now: none)")
        )

    def _toggle(self, name: str, on: bool, chosen: list[str]) -> None:
        self.collections_chosen.emit([n for n in chosen if n != name] + ([name] if on else []))
