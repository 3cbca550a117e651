"""Import MCP servers from other apps: the servers found in Claude Desktop's, LM Studio's and Cursor's
files, each ticked to be copied into Specula (those already here, and entries that cannot be used, are
shown but cannot be ticked). What importing does is engine.mcp.import_servers'.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout

from app.ui import theme
from engine.mcp import ImportSource, McpConfig, ServerConfig


def _what(server: ServerConfig) -> str:
    if server.is_http:
        kind = "HTTP (SSE)" if server.is_sse else "HTTP"
        return f"{kind} · {server.url} (network stays off until you allow it)"
    return "program · " + " ".join([server.command, *server.args])


class McpImportDialog(QDialog):
    """chosen(): for each source, the names of the servers ticked in it."""

    def __init__(self, sources: list[ImportSource], current: McpConfig, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Import MCP servers")
        self.sources = sources
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Servers configured in other apps on this computer. Tick the ones to copy into Specula; a name "
            "already taken gets the app's name added. Their values go to the keyring when you save."
        )
        intro.setWordWrap(True)
        theme.tint(intro)
        layout.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setColumnCount(2)
        layout.addWidget(self.tree, 1)
        self._items: list[tuple[int, str, QTreeWidgetItem]] = []
        for index, source in enumerate(sources):
            top = QTreeWidgetItem([source.app, str(source.path)])
            top.setFlags(Qt.ItemFlag.ItemIsEnabled)
            self.tree.addTopLevelItem(top)
            if source.config.error:
                self._unusable(top, "", source.config.error)
            for name, server in source.config.servers.items():
                item = QTreeWidgetItem(top, [name, _what(server)])
                item.setToolTip(1, _what(server))
                if any(mine.same_server(server) for mine in current.servers.values()):
                    item.setFlags(Qt.ItemFlag.NoItemFlags)
                    item.setText(1, "already in Specula")
                    continue
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(0, Qt.CheckState.Checked)
                self._items.append((index, name, item))
            for name, problem in source.config.problems.items():
                self._unusable(top, name, problem)
            top.setExpanded(True)
        self.tree.resizeColumnToContents(0)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Import")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.resize(self.fontMetrics().horizontalAdvance("M") * 66, self.fontMetrics().lineSpacing() * 18)

    @staticmethod
    def _unusable(top: QTreeWidgetItem, name: str, problem: str) -> None:
        problem = problem.removeprefix(f"{name}: ")  # the file's problems begin with the server's name
        item = QTreeWidgetItem(top, [name, f"cannot be imported: {problem}"])
        item.setFlags(Qt.ItemFlag.NoItemFlags)
        item.setToolTip(1, problem)

    def chosen(self) -> list[tuple[ImportSource, list[str]]]:
        by_source: dict[int, list[str]] = {}
        for index, name, item in self._items:
            if item.checkState(0) == Qt.CheckState.Checked:
                by_source.setdefault(index, []).append(name)
        return [(self.sources[index], names) for index, names in sorted(by_source.items())]
