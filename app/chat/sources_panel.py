"""Under an answer drawn from the user's documents: the passages it was given, as [n] with where each is.

Each row names the file and its page or lines (and the headings it sits under); the rows of the
passages the answer cites are marked ●. Clicking a row shows the passage itself under it; "open"
opens the file in the system's own application.
"""

from __future__ import annotations

import html
import textwrap

from PySide6.QtCore import QEvent, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QPalette
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.core.sources import Source
from app.ui import theme

PREVIEW_CHARS = 1500  # of a passage shown under its row


class SourceRow(QWidget):
    """One passage: its line (show/hide, open) and, on request, its text."""

    def __init__(self, source: Source, parent: QWidget | None = None):
        super().__init__(parent)
        self.source = source
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.line = QLabel()
        self.line.setWordWrap(True)
        self.line.setTextFormat(Qt.TextFormat.RichText)
        self.line.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.line.linkActivated.connect(self._on_link)
        self.line.setToolTip(source.path)
        layout.addWidget(self.line)
        self.passage = QLabel()
        self.passage.setWordWrap(True)
        self.passage.setTextFormat(Qt.TextFormat.PlainText)
        self.passage.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.passage.setAutoFillBackground(True)
        em = self.fontMetrics().height()
        self.passage.setContentsMargins(em // 2, em // 3, em // 2, em // 3)
        text = textwrap.dedent(source.text)  # a licence's or a code block's indent says nothing here
        text = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"
        self.passage.setText(text)
        self.passage.setVisible(False)
        wrapper = QVBoxLayout()
        wrapper.setContentsMargins(em, 0, 0, 0)
        wrapper.addWidget(self.passage)
        layout.addLayout(wrapper)
        self._render()

    @property
    def open(self) -> bool:
        return not self.passage.isHidden()

    def toggle(self) -> None:
        self.passage.setVisible(not self.open)
        self._render()

    def _on_link(self, link: str) -> None:
        if link == "open":
            QDesktopServices.openUrl(QUrl.fromLocalFile(self.source.path))
        else:
            self.toggle()

    def _render(self) -> None:
        s, pal = self.source, self.palette()
        subtle = theme.css(theme.subtle(pal))
        heading = f" · {html.escape(s.heading)}" if s.heading else ""
        self.line.setText(
            f"{'●' if s.cited else '○'} <a href='show'>{'▾' if self.open else '▸'} [{s.n}] {html.escape(s.where())}</a>"
            f"<span style='color:{subtle}'>{heading} — {html.escape(s.collection)}</span> &nbsp;<a href='open'>open</a>"
        )
        background = self.passage.palette()
        background.setColor(QPalette.ColorRole.Window, theme.card(pal, 0.08))
        self.passage.setPalette(background)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._render()


class SourcesPanel(QFrame):
    def __init__(self, sources: list[Source], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sourcesPanel")
        self.rows: list[SourceRow] = []
        self.sources: list[Source] = []
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 2, 0, 2)
        self.layout_.setSpacing(2)
        self.title = QLabel()
        theme.tint(self.title)
        self.title.setToolTip("Click a passage to show it; 'open' opens its file. ● marks those the answer cites.")
        self.layout_.addWidget(self.title)
        self.set_sources(sources)

    def set_sources(self, sources: list[Source]) -> None:
        opened = {row.source.n for row in self.rows if row.open}
        for row in self.rows:
            row.setParent(None)
            row.deleteLater()
        self.sources = list(sources)
        self.rows = [SourceRow(s, self) for s in self.sources]
        for row in self.rows:
            self.layout_.addWidget(row)
            if row.source.n in opened:
                row.toggle()
        cited, count = sum(s.cited for s in self.sources), len(self.sources)
        passages = "a passage" if count == 1 else f"{count} passages"
        self.title.setText(f"<b>Sources</b> · {passages} of your documents" + (f", {cited} cited" if cited else ""))
        self.setVisible(bool(self.sources))

    def row(self, n: int) -> SourceRow | None:
        return next((r for r in self.rows if r.source.n == n), None)
