"""The Tools button beside Documents: which of the user's MCP servers this chat offers the model tools from.

A menu of the servers in mcp.json, ticked for those the chat uses (none by default), and Manage MCP
servers…. The button names the chosen ones; every call is still asked of the user before it runs.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

MAX_NAMES_SHOWN = 20  # characters of chosen names on the button; the tooltip has them all
NO_TOOLS_NOTE = "This model's template has no tools: they are described in its system prompt (less reliable)"


class ToolsButton(QToolButton):
    servers_chosen = Signal(list)  # the servers this chat offers tools from, after a tick
    manage_servers = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setMenu(QMenu(self))
        self.set_servers([], [])

    def set_servers(
        self, names: list[str], chosen: list[str], failed: dict[str, str] | None = None, tools_native: bool = True
    ) -> None:
        """The servers configured, those this chat uses (ticked, named on the button), and those that
        failed to start (their reason in the entry's tooltip). tools_native: the loaded model's chat
        template renders tools (else the menu says they are only described to it)."""
        failed = failed or {}
        menu = self.menu()
        menu.clear()
        menu.setToolTipsVisible(True)
        if not tools_native:
            note = menu.addAction(NO_TOOLS_NOTE)
            note.setEnabled(False)
            menu.addSeparator()
        for name in names:
            act = menu.addAction(name + (" (failed)" if name in failed else ""))
            act.setCheckable(True)
            act.setChecked(name in chosen)
            act.setToolTip(failed.get(name, ""))
            act.toggled.connect(lambda on, name=name: self._toggle(name, on, chosen))
        if not names:
            menu.addAction("No MCP servers yet").setEnabled(False)
        menu.addSeparator()
        menu.addAction("Manage MCP servers…", self.manage_servers.emit)
        used = [n for n in chosen if n in names]
        shown = ", ".join(used)
        if len(shown) > MAX_NAMES_SHOWN:
            shown = shown[: MAX_NAMES_SHOWN - 1].rstrip(", ") + "…"
        self.setText("Tools" if not used else f"Tools: {shown}")
        self.setToolTip(
            "Let the model call tools of your MCP servers in this chat; each call is asked of you first"
            + (f" (now: {', '.join(used)})" if used else " (now: none)")
            + (
                ""
                if tools_native
                else ".\nThis model's chat template has no tools, so they are described in its system prompt; "
                "small models follow such a description less reliably than a template of their own."
            )
        )

    def _toggle(self, name: str, on: bool, chosen: list[str]) -> None:
        self.servers_chosen.emit([n for n in chosen if n != name] + ([name] if on else []))
