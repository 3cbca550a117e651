"""The context fill meter by the input box: prompt tokens of the open conversation plus the message
being typed, out of the model's context, and a warning naming what sending would leave out.
app.bridge.context_counter does the counting.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from app.bridge.worker import TokenCount
from app.ui import theme
from app.ui.elided_label import ElidedLabel

# From this share of the context the meter turns amber.
NEARLY_FULL = 0.85


class ContextMeter(QWidget):
    """A thin bar and "1,234 / 4,096 tokens"; the warning line is a separate label the composer places."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedSize(72, 6)
        self.bar.setRange(0, 1000)
        self.bar.setAccessibleName("Context used")
        layout.addWidget(self.bar)
        self.label = ElidedLabel()  # gives up width rather than widen the window (the whole count is in the tooltip)
        theme.tint(self.label)
        layout.addWidget(self.label)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setVisible(False)
        theme.tint(self.warning, theme.warning_colour)
        self.show_no_model()

    def show_no_model(self) -> None:
        self.bar.setValue(0)
        self.label.setText("No model loaded")
        self.setToolTip("The context meter counts the conversation's tokens once a model is loaded.")
        self.set_warning("")

    def show_counting(self) -> None:
        """A model was (re)loaded: what was shown was counted for the one before, warning included."""
        self.label.setText("Counting tokens…")
        theme.tint(self.label)
        self.setToolTip("The conversation is counted with the model's tokenizer once the engine is free.")
        self.set_warning("")

    def show_remote(self, host: str) -> None:
        self.bar.setValue(0)
        self.label.setText(f"Context: {host}'s")
        self.setToolTip(
            f"This chat's answers are computed on {host}: its own tokenizer and context size decide what fits, "
            "so this computer does not count them."
        )
        self.set_warning("")

    def show_count(self, count: TokenCount, warning: str) -> None:
        share = count.n_tokens / count.n_ctx
        self.bar.setValue(min(1000, round(share * 1000)))
        documents = f" ({count.n_documents:,} from your documents)" if count.n_documents else ""
        self.label.setText(f"{count.n_tokens:,} / {count.n_ctx:,} tokens{documents}")
        self.setToolTip(
            f"The conversation and the message you are typing, attachments included, as the model reads them: "
            f"{count.n_tokens:,} tokens of its {count.n_ctx:,}-token context ({share:.0%}). "
            + (
                f"{count.n_documents:,} of them are passages of your documents found for the message, "
                "as many as fit beside the conversation. "
                if count.n_documents
                else ""
            )
            + (f"{count.n_tools:,} describe the tools this chat offers. " if count.n_tools else "")
            + f"{count.room:,} tokens are kept free for the answer."
        )
        full = warning or share >= NEARLY_FULL
        theme.tint(self.label, theme.warning_colour if full else None)
        self.set_warning(warning)

    def set_warning(self, text: str) -> None:
        self.warning.setText(text)
        self.warning.setVisible(bool(text))

    def show_failure(self, error: str) -> None:
        self.label.setText("Context: count failed")
        self.setToolTip(error)
        self.set_warning("")
