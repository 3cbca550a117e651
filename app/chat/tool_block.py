"""In an answer: each tool it called, as a block folded to one line (tool, server, outcome, time taken).

Clicking the line unfolds the full arguments (pretty JSON) and the result or the error. A call waiting
for the user's approval or running says so. ToolBlocks holds an answer's blocks, in the order called.
"""

from __future__ import annotations

import html
import json

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.core.tool_steps import ToolStatus, ToolUse
from app.ui import theme

PREVIEW_CHARS = 4000  # of a result shown unfolded; the store and exports keep it whole

OUTCOMES = {
    ToolStatus.PENDING: "waiting",
    ToolStatus.DONE: "done",
    ToolStatus.FAILED_TOOL: "the tool reported an error",
    ToolStatus.DENIED: "denied",
    ToolStatus.TIMED_OUT: "timed out",
    ToolStatus.FAILED: "failed",
    ToolStatus.CANCELLED: "not run",
}


class ToolBlock(QFrame):
    """One call: its line, and unfolded, its arguments and result."""

    def __init__(self, use: ToolUse, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("toolBlock")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.use = use
        layout = QVBoxLayout(self)
        em = self.fontMetrics().height()
        layout.setContentsMargins(em // 2, em // 4, em // 2, em // 4)
        layout.setSpacing(2)
        self.line = QLabel()
        self.line.setWordWrap(True)
        self.line.setTextFormat(Qt.TextFormat.RichText)
        self.line.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.line.linkActivated.connect(lambda _link: self.toggle())
        layout.addWidget(self.line)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.PlainText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setFont(theme.monospace())
        self.details.setAutoFillBackground(True)
        self.details.setContentsMargins(em // 2, em // 3, em // 2, em // 3)
        self.details.setVisible(False)
        layout.addWidget(self.details)
        self.set_use(use)

    @property
    def expanded(self) -> bool:
        return not self.details.isHidden()

    def toggle(self) -> None:
        self.details.setVisible(not self.expanded)
        self._render()

    def set_use(self, use: ToolUse) -> None:
        self.use = use
        self.details.setText(details_text(use))
        self._render()

    def _render(self) -> None:
        u, pal = self.use, self.palette()
        subtle = theme.css(theme.subtle(pal))
        outcome = OUTCOMES[u.status]
        if u.status == ToolStatus.PENDING:
            outcome = "running…" if u.elapsed_s or u.result else "waiting"
        colour = theme.css(theme.error_colour(pal)) if u.status not in (ToolStatus.DONE, ToolStatus.PENDING) else subtle
        took = f" · {u.elapsed_s:.1f} s" if u.elapsed_s else ""
        self.line.setText(
            f"<a href='toggle'>{'▾' if self.expanded else '▸'} Tool: <b>{html.escape(u.name)}</b></a>"
            f"<span style='color:{subtle}'> on {html.escape(u.server or '?')}{took}</span>"
            f" <span style='color:{colour}'>· {html.escape(outcome)}</span>"
        )
        self.line.setToolTip("Click to show the arguments and the result")
        background = self.details.palette()
        background.setColor(QPalette.ColorRole.Window, theme.card(pal, 0.08))
        self.details.setPalette(background)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._render()


def details_text(use: ToolUse) -> str:
    parts = ["Arguments:", json.dumps(use.arguments, indent=2, ensure_ascii=False)]
    if use.status in (ToolStatus.DONE, ToolStatus.FAILED_TOOL):
        result = use.result if len(use.result) <= PREVIEW_CHARS else use.result[:PREVIEW_CHARS] + "…"
        parts += ["", "Result:" if use.status == ToolStatus.DONE else "The tool reported an error:", result]
    if use.error and use.status != ToolStatus.FAILED_TOOL:
        parts += ["", use.error]
    return "\n".join(parts)


class ToolBlocks(QWidget):
    """An answer's tool calls, one block each; hidden when it called none."""

    def __init__(self, uses: list[ToolUse], parent: QWidget | None = None):
        super().__init__(parent)
        self.blocks: list[ToolBlock] = []
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 2, 0, 2)
        self.layout_.setSpacing(4)
        self.set_uses(uses)

    def set_uses(self, uses: list[ToolUse]) -> None:
        """Update in place: a block already shown keeps whether it is unfolded."""
        for block, use in zip(self.blocks, uses, strict=False):
            block.set_use(use)
        for use in uses[len(self.blocks) :]:
            block = ToolBlock(use, self)
            self.blocks.append(block)
            self.layout_.addWidget(block)
        for block in self.blocks[len(uses) :]:
            block.setParent(None)
            block.deleteLater()
        del self.blocks[len(uses) :]
        self.setVisible(bool(uses))
