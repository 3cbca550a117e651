"""The Documents button beside Attach…: which of the user's document collections this chat answers from.

A menu of the collections, ticked for those the chat uses (none by default), and Manage documents….
The button names the chosen ones, so what the next answer will search is always in view. A chat
answered by a remote engine has one more tick, off by default: send the passages found to that
engine (the window asks to confirm); while it is on, the button says where they go.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

MAX_NAMES_SHOWN = 24  # characters of chosen names on the button; the tooltip has them all


@dataclass(frozen=True)
class RemoteTarget:
    """The remote engine a chat is answered by, and whether the user lets its passages go there."""

    name: str
    host: str
    sending: bool = False


class DocumentsButton(QToolButton):
    collections_chosen = Signal(list)  # the collections this chat answers from, after a tick
    manage_documents = Signal()
    remote_sending_chosen = Signal(bool)  # the user ticked or unticked "Send passages to <engine>"

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setMenu(QMenu(self))
        self.set_collections([], [])

    def set_collections(self, names: list[str], chosen: list[str], remote: RemoteTarget | None = None) -> None:
        """The collections there are, and those this chat uses (ticked, and named on the button);
        remote: the engine answering the chat, when it is remote."""
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
        used = [n for n in chosen if n in names]
        if remote is not None:
            send = menu.addAction(f"Send passages to {remote.name} ({remote.host})")
            send.setCheckable(True)
            send.setChecked(remote.sending)
            send.setToolTip("The passages found for each question go to that server with it (off: asked without them)")
            send.toggled.connect(self.remote_sending_chosen.emit)
            menu.setToolTipsVisible(True)
            menu.addSeparator()
        menu.addAction("Manage documents…", self.manage_documents.emit)
        shown = ", ".join(used)
        if len(shown) > MAX_NAMES_SHOWN:
            shown = shown[: MAX_NAMES_SHOWN - 1].rstrip(", ") + "…"
        sent = remote is not None and remote.sending and used
        self.setText(("Documents" if not used else f"Documents: {shown}") + (f" → {remote.host}" if sent else ""))
        where = (
            ""
            if remote is None or not used
            else f". The passages found are sent to {remote.host}"
            if remote.sending
            else f". This chat's remote engine ({remote.host}) is asked without them"
        )
        self.setToolTip(
            "Answer from your own documents: this chat searches the collections ticked here and cites what it uses"
            + (f" (now: {', '.join(used)})" if used else " (now: none)")
            + where
        )

    def _toggle(self, name: str, on: bool, chosen: list[str]) -> None:
        self.collections_chosen.emit([n for n in chosen if n != name] + ([name] if on else []))
