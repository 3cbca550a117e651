"""Counting the open conversation's context for the meter by the input box, off the GUI thread.

Counting is exact (the engine's tokenizer and chat template) and runs on the engine thread: the
GUI asks (EngineHost.count_tokens), a short pause after the last keystroke, and shows the newest
answer. While an answer streams the engine is busy, so the count waits for it to end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.bridge.answer_controller import chat_messages, stored_count
from app.bridge.host import EngineHostApi
from app.bridge.worker import TokenCount
from app.core.store import Message, Role, history

# How long typing must pause before the count is asked for.
DEBOUNCE_MS = 300


class CountDisplay(Protocol):
    """What shows a count (the chat's ContextMeter)."""

    def show_no_model(self) -> None: ...
    def show_counting(self) -> None: ...
    def show_count(self, count: TokenCount, warning: str) -> None: ...
    def show_failure(self, error: str) -> None: ...
    def show_remote(self, host: str) -> None: ...


class ContextCounter(QObject):
    """Asks the engine thread for counts and shows the newest on a CountDisplay.

    source() gives what the next answer would see: (the conversation's messages, the system prompt,
    the answer's token limit); draft() gives the message being typed (text, attachments, and the id
    of the message being edited, whose successors sending would replace, or None). remote() gives the
    host of the remote engine that answers the conversation ("" for this computer): its tokenizer and
    context are the server's, so nothing is counted here and the meter says so. collections() gives the
    chat's document collections: the passages sending a typed message would put before it count too.
    tools() gives the tools the chat offers (those of its MCP servers that have started): the template puts
    their descriptions in every prompt, so they count whether or not a message is being typed.
    """

    counted = Signal(object)  # the TokenCount just shown (tests wait on it)

    def __init__(
        self,
        host: EngineHostApi,
        meter: CountDisplay,
        source: Callable,
        draft: Callable,
        parent=None,
        remote: Callable[[], str] = lambda: "",
        collections: Callable[[], list[str]] = list,
        tools: Callable[[], tuple] = tuple,
    ):
        super().__init__(parent)
        self.host, self.meter, self.source, self.draft, self.remote = host, meter, source, draft, remote
        self.collections, self.tools = collections, tools
        self.latest: TokenCount | None = None
        self._asked = 0
        self._counted_messages: list[Message] = []
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self.count_now)
        host.worker.tokens_counted.connect(self._on_counted)
        host.worker.chat_format_known.connect(self._on_model_ready)  # after each load and each template change
        host.worker.unloaded.connect(self.refresh)

    @Slot()
    def refresh(self, *_args) -> None:
        """Count again after a short pause (restarted by each call: typing asks once it pauses)."""
        self.timer.start()

    @Slot()
    def _on_model_ready(self, *_args) -> None:
        # A model is there now: until its count comes (after an answer already streaming, if one is),
        # the meter must not go on saying that none is loaded.
        if not self.remote():
            self.meter.show_counting()
        self.refresh()

    @Slot()
    def count_now(self) -> None:
        self.timer.stop()
        if where := self.remote():
            self._asked = 0  # a count still on its way is not shown
            self.meter.show_remote(where)
            return
        messages, system_prompt, max_tokens = self.source()
        text, attachments, editing_id = self.draft()
        if editing_id is not None:  # sending replaces the edited message and all after it
            messages = [m for m in messages if m.id < editing_id]
        messages = history(messages)
        collections: tuple[str, ...] = ()
        if text.strip() or attachments:
            messages = [*messages, Message(0, 0, Role.USER, text, attachments=list(attachments))]
            collections = tuple(self.collections())
        self._counted_messages = messages
        self._asked = self.host.count_tokens(
            chat_messages(messages, system_prompt), max_tokens, collections, tuple(self.tools())
        )

    @Slot(object)
    def _on_counted(self, count: TokenCount) -> None:
        if count.id != self._asked:
            return  # an older question: a newer answer is on its way
        self.latest = count
        if count.error:
            self.meter.show_failure(count.error)
        elif count.n_ctx == 0:
            self.meter.show_no_model()
        else:
            self.meter.show_count(count, overflow_warning(count, self._counted_messages))
        self.counted.emit(count)


def overflow_warning(count: TokenCount, messages: list[Message]) -> str:
    """What sending now would cost, in words; "" when everything fits with room for the answer."""
    if count.too_long:
        return "Too long to send: " + count.too_long.splitlines()[0] + " Shorten it or remove an attachment."
    left_out = []
    if count.n_dropped:
        dropped = messages[: stored_count(messages, count.n_dropped)]
        first, last = _gist(dropped[0]), _gist(dropped[-1])
        which = f"“{first}”" if len(dropped) == 1 else f"from “{first}” to “{last}”"
        n = len(dropped)
        left_out.append(f"the {'oldest message' if n == 1 else f'{n} oldest messages'} ({which})")
    if count.n_results_cut:
        n = count.n_results_cut
        left_out.append(f"the middle of {'a tool result' if n == 1 else f'{n} tool results'}")
    if not left_out:
        return ""
    return (
        f"Over the context: sending this leaves {' and '.join(left_out)} out of what the model reads. "
        "They stay in the chat."
    )


def _gist(message: Message, limit: int = 32) -> str:
    called = f"{message.tool_uses[0].name} call" if message.tool_uses else "…"
    text = " ".join(message.content.split()) or (message.attachments[0].name if message.attachments else called)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
