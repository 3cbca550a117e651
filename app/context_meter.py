"""The context fill meter by the input box: prompt tokens of the open conversation plus the message
being typed, out of the model's context, and a warning naming what sending would leave out.

Counting is exact (the engine's tokenizer and chat template) and runs on the engine thread: the
GUI asks (EngineHost.count_tokens), a short pause after the last keystroke, and shows the newest
answer. While an answer streams the engine is busy, so the count waits for it to end.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from app import theme
from app.answer_controller import chat_messages
from app.store import Message, history
from app.worker import EngineHost, TokenCount

# How long typing must pause before the count is asked for.
DEBOUNCE_MS = 300
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
        self.label = QLabel()
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

    def show_count(self, count: TokenCount, warning: str) -> None:
        share = count.n_tokens / count.n_ctx
        self.bar.setValue(min(1000, round(share * 1000)))
        self.label.setText(f"{count.n_tokens:,} / {count.n_ctx:,} tokens")
        self.setToolTip(
            f"The conversation and the message you are typing, attachments included, as the model reads them: "
            f"{count.n_tokens:,} tokens of its {count.n_ctx:,}-token context ({share:.0%}). "
            f"{count.room:,} tokens are kept free for the answer."
        )
        full = warning or share >= NEARLY_FULL
        theme.tint(self.label, theme.warning_colour if full else None)
        self.set_warning(warning)

    def set_warning(self, text: str) -> None:
        self.warning.setText(text)
        self.warning.setVisible(bool(text))


class ContextCounter(QObject):
    """Asks the engine thread for counts and shows the newest on a ContextMeter.

    source() gives what the next answer would see: (the conversation's messages, the system prompt,
    the answer's token limit); draft() gives the message being typed (text, attachments, and the id
    of the message being edited, whose successors sending would replace, or None).
    """

    counted = Signal(object)  # the TokenCount just shown (tests wait on it)

    def __init__(self, host: EngineHost, meter: ContextMeter, source: Callable, draft: Callable, parent=None):
        super().__init__(parent)
        self.host, self.meter, self.source, self.draft = host, meter, source, draft
        self.latest: TokenCount | None = None
        self._asked = 0
        self._counted_messages: list[Message] = []
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self.count_now)
        host.worker.tokens_counted.connect(self._on_counted)
        host.worker.chat_format_known.connect(self.refresh)  # after each load and each template change
        host.worker.unloaded.connect(self.refresh)

    @Slot()
    def refresh(self, *_args) -> None:
        """Count again after a short pause (restarted by each call: typing asks once it pauses)."""
        self.timer.start()

    @Slot()
    def count_now(self) -> None:
        self.timer.stop()
        messages, system_prompt, max_tokens = self.source()
        text, attachments, editing_id = self.draft()
        if editing_id is not None:  # sending replaces the edited message and all after it
            messages = [m for m in messages if m.id < editing_id]
        messages = history(messages)
        if text.strip() or attachments:
            messages = [*messages, Message(0, 0, "user", text, attachments=list(attachments))]
        self._counted_messages = messages
        self._asked = self.host.count_tokens(chat_messages(messages, system_prompt), max_tokens)

    @Slot(object)
    def _on_counted(self, count: TokenCount) -> None:
        if count.id != self._asked:
            return  # an older question: a newer answer is on its way
        self.latest = count
        if count.error:
            self.meter.label.setText("Context: count failed")
            self.meter.setToolTip(count.error)
            self.meter.set_warning("")
        elif count.n_ctx == 0:
            self.meter.show_no_model()
        else:
            self.meter.show_count(count, overflow_warning(count, self._counted_messages))
        self.counted.emit(count)


def overflow_warning(count: TokenCount, messages: list[Message]) -> str:
    """What sending now would cost, in words; "" when everything fits with room for the answer."""
    if count.too_long:
        return "Too long to send: " + count.too_long.splitlines()[0] + " Shorten it or remove an attachment."
    if not count.n_dropped:
        return ""
    dropped = messages[: count.n_dropped]
    first, last = _gist(dropped[0]), _gist(dropped[-1])
    which = f"“{first}”" if len(dropped) == 1 else f"from “{first}” to “{last}”"
    n = len(dropped)
    return (
        f"Over the context: sending this leaves the {'oldest message' if n == 1 else f'{n} oldest messages'} "
        f"({which}) out of what the model reads. They stay in the chat."
    )


def _gist(message: Message, limit: int = 32) -> str:
    text = " ".join(message.content.split()) or (message.attachments[0].name if message.attachments else "…")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
