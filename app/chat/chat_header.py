"""The bar above the chat: its title, the model picker, the token-colour switch and Settings; while token
colours are on, their legend on a line of its own below (beside the title it left the title a letter)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.chat.model_picker import ModelPicker
from app.ui import theme
from app.ui.elided_label import ElidedLabel

LEGEND_SOURCES = (
    "draft",
    "mtp",
    "lookup",
    "history",
    "documents",
)  # the sources that get a colour; the target's has none


class ChatHeader(QWidget):
    def __init__(self, library: Callable, parent: QWidget | None = None):
        """library: the ModelLibrary, when the picker first needs it."""
        super().__init__(parent)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(12, 6, 8, 6)
        rows.setSpacing(4)
        row = QHBoxLayout()
        rows.addLayout(row)
        self.title_label = ElidedLabel()  # a long title gives way: the buttons beside it stay
        font = self.title_label.font()
        font.setBold(True)
        self.title_label.setFont(font)
        row.addWidget(self.title_label, 1)
        self.model_picker = ModelPicker(library)
        row.addWidget(self.model_picker, 3)
        self.legend = QLabel()
        self.legend.setToolTip("Token colours: who proposed each token of the answers")
        self.legend.setWordWrap(True)  # a narrow window wraps the chips rather than widening itself
        self.legend.setAlignment(Qt.AlignmentFlag.AlignRight)
        rows.addWidget(self.legend)
        self.colours_button = QToolButton()
        self.colours_button.setText("Token colours")
        self.colours_button.setCheckable(True)
        self.colours_button.setToolTip(
            "Colour each token of the answers by its source: accepted from the draft model, from prompt lookup, "
            "from your earlier conversations (history), from your documents, or produced by the target (Ctrl+T). "
            "Hover a token for details."
        )
        self.colours_button.toggled.connect(self.update_legend)
        row.addWidget(self.colours_button)
        self.settings_button = QToolButton()
        self.settings_button.setText("Settings")
        self.settings_button.setToolTip("Models, generation and speculation settings (Ctrl+,)")
        row.addWidget(self.settings_button)
        self.update_legend()

    def set_title(self, title: str) -> None:
        self.title_label.setText(title)
        self.title_label.setToolTip(title)

    def update_legend(self, *_args) -> None:
        """The colour chips, shown while token colours are on."""
        if not self.colours_button.isChecked():
            self.legend.setText("")
            self.legend.setVisible(False)
            return
        pal = self.palette()
        chips = []
        for source in LEGEND_SOURCES:
            colour = theme.css(theme.token_background(source, pal))
            # A chip never breaks; a narrow window wraps the line between chips.
            style = f"background:{colour}; white-space:nowrap"
            chips.append(f"<span style='{style}'>&nbsp;{theme.SOURCE_LABELS[source]}&nbsp;</span>")
        chips.append("<span style='white-space:nowrap'>target (no colour)</span>")
        self.legend.setText("&nbsp; ".join(chips))
        self.legend.setVisible(True)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.update_legend()
