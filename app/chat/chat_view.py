"""The conversation on screen: one widget per message in a scroll area.

Streaming is cheap by construction: tokens are queued and drawn at most once per frame
(FRAME_MS), only the streaming message's own text changes, and the view keeps following the
end only while the reader is at the end.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QBoxLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.answer_text import AnswerText
from app.chat.attachment_chips import AttachmentChips
from app.chat.rich_text import MessageBody
from app.chat.sources_panel import SourcesPanel
from app.chat.stats_footer import StatsFooter
from app.chat.thinking_view import ThinkingSection
from app.core.figures import DRAFTER_LABELS, comparison_heading
from app.core.store import Message, Role, Token
from app.ui import theme
from app.ui.elided_label import ElidedLabel
from engine import AnswerStats, FinishReason

FRAME_MS = 16  # about 60 screen updates a second, whatever the token rate
MAX_WIDTH_EM = 84  # the message column: code blocks use all of it (prose is narrower, see rich_text)
SIDE_BY_SIDE_EM = 64  # a message at least this wide shows a comparison's plain text beside the answer


# How an answer that ended otherwise than by finishing is marked.
ENDED_STATES = {
    FinishReason.CANCELLED: "stopped",
    FinishReason.LENGTH: "length",
    FinishReason.CONTEXT: "context",
    FinishReason.ERROR: "error",
}


def message_state(message: Message, streaming: bool) -> str:
    if streaming:
        return "streaming"
    if not message.complete:
        return "incomplete"
    return ENDED_STATES.get(message.finish_reason, "done")


class MessageWidget(QFrame):
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    compare_requested = Signal(int)
    variant_requested = Signal(int, int)  # this answer's id, the alternate to show instead

    def __init__(
        self,
        message: Message,
        *,
        colours: bool,
        streaming: bool = False,
        show_reasoning: bool = True,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.message = message
        self.show_reasoning = show_reasoning
        self.streaming = streaming
        self.live_stats: AnswerStats | None = None
        self.is_user = message.role == Role.USER
        self.setObjectName("userMessage" if self.is_user else "assistantMessage")
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        layout = QVBoxLayout(self)
        pad = self.fontMetrics().height() // 2
        layout.setContentsMargins(pad + 4, pad, pad + 4, pad)
        layout.setSpacing(4)

        header = QHBoxLayout()
        header.setSpacing(6)
        # Names give way in narrow windows (elided), so Copy, Edit and Regenerate stay in view.
        self.role_label = ElidedLabel()
        bold = self.role_label.font()
        bold.setBold(True)
        self.role_label.setFont(bold)
        header.addWidget(self.role_label)
        self.meta_label = ElidedLabel()
        header.addWidget(self.meta_label)
        header.addStretch(1)
        # ‹ 2/3 ›: the alternates of a regenerated answer, each kept with its statistics.
        self.previous_button = self._tool("‹", "The previous version of this answer", lambda: self._step_variant(-1))
        self.variant_label = QLabel()
        self.next_button = self._tool("›", "The next version of this answer", lambda: self._step_variant(1))
        for widget in (self.previous_button, self.variant_label, self.next_button):
            header.addWidget(widget)
        self.copy_button = self._tool("Copy", "Copy this message's text (Markdown) to the clipboard", self.copy)
        header.addWidget(self.copy_button)
        if self.is_user:
            self.edit_button = self._tool(
                "Edit",
                "Edit this message and send it again; the messages after it are replaced (Ctrl+Up: the last one)",
                lambda: self.edit_requested.emit(message.id),
            )
            header.addWidget(self.edit_button)
        else:
            self.regenerate_button = self._tool(
                "Regenerate", "Write this answer again (Ctrl+R)", lambda: self.regenerate_requested.emit(message.id)
            )
            header.addWidget(self.regenerate_button)
        layout.addLayout(header)

        self.thinking = ThinkingSection(self)
        layout.addWidget(self.thinking)
        if message.reasoning and streaming and not message.content:
            self.thinking.start(message.reasoning)
        elif message.reasoning:
            self._finish_thinking(message, collapse=True)
        self._show_thinking()

        self.attachment_chips = AttachmentChips(message.attachments)  # hidden when none
        layout.addWidget(self.attachment_chips)

        # The text, with the blocks of any tools it called where it called them.
        self.body = AnswerText(self)
        self.body.token_tooltip = self.token_tooltip
        # The answer and, on request, the plain-decoding text of its comparison beside it.
        self.texts = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.texts.addWidget(self.body, 1)
        self.plain_panel: PlainTextPanel | None = None
        layout.addLayout(self.texts)

        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setVisible(False)
        theme.tint(self.error_label, theme.error_colour)
        theme.tint(self.meta_label)
        layout.addWidget(self.error_label)
        self.silent_label = QLabel()  # an answer that ended by itself having written nothing says so
        self.silent_label.setVisible(False)
        theme.tint(self.silent_label)
        layout.addWidget(self.silent_label)

        self.sources_panel = SourcesPanel(message.sources, self)  # hidden when the answer had no documents
        layout.addWidget(self.sources_panel)

        self.footer: StatsFooter | None = None
        if not self.is_user:
            self.footer = StatsFooter(self)
            self.footer.set_params(message.params)
            self.footer.compare_requested.connect(lambda: self.compare_requested.emit(self.message.id))
            self.footer.plain_text_toggled.connect(self.show_plain_text)
            layout.addWidget(self.footer)

        self.body.set_content(
            message.content,
            message.tokens,
            streaming=streaming,
            colours=colours and not self.is_user,
            uses=message.tool_uses,
        )
        self._refresh()
        self._restyle()

    def _tool(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.clicked.connect(slot)
        return button

    # -- content ------------------------------------------------------------------------------

    def append_tokens(self, tokens: list[Token]) -> None:
        if self.thinking.thinking and any(t.text for t in tokens):
            self.thinking.end_live()  # the answer starts: the thinking folds away
        self.body.append(tokens)

    def append_reasoning(self, text: str) -> None:
        self.thinking.append(text)
        self._show_thinking()

    def set_show_reasoning(self, show: bool) -> None:
        self.show_reasoning = show
        self._show_thinking()

    def _show_thinking(self) -> None:
        self.thinking.setVisible(self.show_reasoning and bool(self.thinking.text or self.thinking.thinking))

    def _finish_thinking(self, message: Message, collapse: bool) -> None:
        stats = message.stats
        n, seconds = (stats.n_reasoning_tokens, stats.reasoning_s) if stats else (0, 0.0)
        self.thinking.finish(message.reasoning, n, seconds, collapse=collapse)

    def set_sources(self, sources: list) -> None:
        self.message.sources = sources
        self.sources_panel.set_sources(sources)

    def set_tool_uses(self, uses: list) -> None:
        self.message.tool_uses = list(uses)
        self.body.set_tool_uses(self.message.tool_uses)

    def set_live_stats(self, stats: AnswerStats) -> None:
        self.live_stats = stats
        if self.footer:
            self.footer.set_stats(stats, "streaming")

    def finish(self, message: Message) -> None:
        self.message = message
        self.streaming = False
        self.live_stats = None
        if message.reasoning:
            self._finish_thinking(message, collapse=self.thinking.thinking and bool(message.content))
        self._show_thinking()
        self.body.finish(message.content, message.tokens, message.tool_uses)
        self.sources_panel.set_sources(message.sources)
        self._refresh()

    def set_colours(self, colours: bool) -> None:
        if not self.is_user:
            self.body.set_colours(colours)

    def set_last(self, last: bool, busy: bool) -> None:
        """Any message of yours can be edited; Regenerate applies to the last answer. Neither while busy."""
        if self.is_user:
            self.edit_button.setEnabled(not busy)
        else:
            self.regenerate_button.setVisible(last)
            self.regenerate_button.setEnabled(not busy)
        self._show_variants(busy)

    def _show_variants(self, busy: bool = False) -> None:
        variants = self.message.variants
        many = len(variants) > 1 and self.message.id in variants
        for widget in (self.previous_button, self.variant_label, self.next_button):
            widget.setVisible(many)
        if many:
            index = variants.index(self.message.id)
            self.variant_label.setText(f"{index + 1}/{len(variants)}")
            self.variant_label.setToolTip(f"Version {index + 1} of {len(variants)} of this answer")
            self.previous_button.setEnabled(not busy and not self.streaming and index > 0)
            self.next_button.setEnabled(not busy and not self.streaming and index < len(variants) - 1)

    def _step_variant(self, step: int) -> None:
        variants = self.message.variants
        index = variants.index(self.message.id) + step if self.message.id in variants else -1
        if 0 <= index < len(variants):
            self.variant_requested.emit(self.message.id, variants[index])

    def show_plain_text(self, show: bool) -> None:
        """The text plain decoding wrote, beside the answer (below it in a narrow window)."""
        comparison = self.message.comparison or {}
        if show and "plain_text" in comparison:
            if self.plain_panel is None:
                self.plain_panel = PlainTextPanel(self)
                self.texts.addWidget(self.plain_panel, 1)
            self.plain_panel.set_comparison(comparison)
            self._arrange_texts()
        if self.plain_panel is not None:
            self.plain_panel.setVisible(show)

    def _arrange_texts(self) -> None:
        wide = self.width() >= SIDE_BY_SIDE_EM * self.fontMetrics().horizontalAdvance("M")
        self.texts.setDirection(QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.plain_panel is not None:
            self._arrange_texts()

    def set_comparison(self, comparison: dict | None, running: bool = False) -> None:
        if comparison is not None:
            self.message.comparison = comparison
        if self.footer:
            self.footer.set_comparison(comparison, running)
        if self.plain_panel is not None and self.plain_panel.isVisible() and comparison:
            self.plain_panel.set_comparison(comparison)

    def set_assistant_name(self, name: str) -> None:
        if not self.is_user:
            self.role_label.setText(name)
            self.role_label.setToolTip(name)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.body.plain_text())
        self.copy_button.setText("Copied")
        QTimer.singleShot(1500, self.copy_button, lambda: self.copy_button.setText("Copy"))

    def _refresh(self) -> None:
        m = self.message
        if self.is_user:
            self.role_label.setText("You")
        else:
            self.set_assistant_name(m.params.get("target") or "Assistant")
            draft, remote = m.params.get("draft"), m.params.get("remote")
            if isinstance(remote, dict) and remote.get("host"):  # where it was computed, always said
                self.meta_label.setText(f"on {remote['host']} (remote)")
            else:
                self.meta_label.setText(f"with {draft}" if draft else "")
            self.meta_label.setToolTip(self.meta_label.text())
        if m.error:
            # The engine's advice names no front end's controls; here the context is a setting.
            where = (
                "\nThe context size is in Settings (Ctrl+,) → Models."
                if m.finish_reason == FinishReason.CONTEXT
                else ""
            )
            self.error_label.setText(error_html(m.error + where))
        self.error_label.setVisible(bool(m.error))
        silent = (
            not self.is_user
            and not self.streaming
            and m.finish_reason == FinishReason.STOP
            and not m.error
            and not m.content.strip()
        )
        if silent:
            after = " after its tool calls" if m.tool_uses else " after thinking" if m.reasoning.strip() else ""
            self.silent_label.setText(f"The model ended its answer{after} without writing anything.")
        self.silent_label.setVisible(silent)
        if self.footer:
            self.footer.set_params(m.params)
            self.footer.set_stats(self.live_stats or m.stats, message_state(m, self.streaming))
            if m.comparison:
                self.footer.set_comparison(m.comparison)

    def token_tooltip(self, index: int) -> str:
        tokens = self.body.tokens
        if not 0 <= index < len(tokens):
            return ""
        token = tokens[index]
        stats = self.live_stats or self.message.stats
        label = theme.SOURCE_LABELS.get(token.source, token.source)
        lines = [
            f"<b>{html.escape(label[:1].upper() + label[1:])}</b>: "
            f"{html.escape(theme.SOURCE_DESCRIPTIONS.get(token.source, ''))}",
            f"Token {index + 1} of {len(tokens)}: <code>{html.escape(repr(token.text))}</code>",
        ]
        if stats and 0 <= token.round < len(stats.rounds):
            r = stats.rounds[token.round]
            if r.drafted:
                lines.append(
                    f"Round {token.round + 1}: {DRAFTER_LABELS[r.drafter]} drafted {r.drafted} "
                    f"(draft length {r.draft_length}), target accepted {r.accepted}"
                )
            else:
                lines.append(f"Round {token.round + 1}: nothing drafted, one plain target step")
        return "<br>".join(lines)

    # -- looks --------------------------------------------------------------------------------

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._restyle()

    _restyling = False

    def _restyle(self) -> None:
        if self._restyling:
            return
        self._restyling = True
        try:
            pal = QGuiApplication.palette()
            if self.is_user:
                self.setAutoFillBackground(True)
                own = self.palette()
                own.setColor(QPalette.ColorRole.Window, theme.card(pal, 0.07))
                self.setPalette(own)
                self.setFrameShape(QFrame.Shape.NoFrame)
        finally:
            self._restyling = False


class PlainTextPanel(QFrame):
    """What plain decoding wrote when the answer was compared: the same text, unless sampling differed."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self.heading = QLabel()
        self.heading.setWordWrap(True)
        theme.tint(self.heading)
        layout.addWidget(self.heading)
        self.body = MessageBody(self)  # rendered as the answer is: Markdown, code blocks
        layout.addWidget(self.body)

    def set_comparison(self, comparison: dict) -> None:
        self.heading.setText(comparison_heading(comparison))
        self.body.set_content(comparison.get("plain_text", ""), [], streaming=False, colours=False)


def error_html(text: str) -> str:
    first, _, rest = text.partition("\n")
    out = f"<b>⚠ {html.escape(first)}</b>"
    if rest:
        out += "<br>" + html.escape(rest).replace("\n", "<br>")
    return out


class Notice(QFrame):
    """A message from the app itself in the chat (a model that failed to load, a draft left out)."""

    closed = Signal()

    def __init__(self, text: str, kind: str = "error", actions: list[tuple[str, object]] | None = None, parent=None):
        super().__init__(parent)
        self.kind = kind
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        self.label = QLabel(error_html(text) if kind == "error" else html.escape(text).replace("\n", "<br>"))
        self.label.setTextFormat(Qt.TextFormat.RichText)  # escaped text: never shown as "&#x27;"
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        for label, slot in actions or []:
            button = QToolButton(self)
            button.setText(label)
            button.clicked.connect(slot)
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        close = QToolButton(self)
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self._close)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        if kind == "error":
            theme.tint(self.label, theme.error_colour)

    def text(self) -> str:
        return self.label.text()

    def _close(self) -> None:
        self.closed.emit()
        self.hide()
        self.deleteLater()


class ChatView(QScrollArea):
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    compare_requested = Signal(int)
    variant_requested = Signal(int, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.column = QWidget()
        self.column.setObjectName("chatColumn")
        self.column_layout = QVBoxLayout(self.column)
        self.column_layout.setSpacing(self.fontMetrics().height() // 2)
        self.column_layout.addStretch(1)  # keeps messages at the top while they are few
        self.setWidget(self.column)
        self.placeholder = QLabel(
            "Ask anything. Answers stream as they are written; under each one, Specula shows what "
            "speculative decoding did: accepted drafts, tokens per second and the estimated speedup."
        )
        self.placeholder.setWordWrap(True)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        em = self.fontMetrics().height()
        self.placeholder.setContentsMargins(em, 3 * em, em, 3 * em)
        theme.tint(self.placeholder)
        self.column_layout.insertWidget(0, self.placeholder)
        self.widgets: dict[int, MessageWidget] = {}
        self.notices: list[Notice] = []
        self.colours = False
        self.show_reasoning = True
        self.busy = False
        self._pending: dict[int, list[Token]] = {}
        self._frame = QTimer(self)
        self._frame.setSingleShot(True)
        self._frame.setInterval(FRAME_MS)
        self._frame.timeout.connect(self._draw_pending)
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._keep_following)
        self.verticalScrollBar().valueChanged.connect(self._user_scrolled)
        self.frames_drawn = 0  # for tests: token batches drawn
        self._restyle()

    # -- messages -----------------------------------------------------------------------------

    def set_messages(self, messages: list[Message], streaming_id: int | None = None, streaming_tokens=None) -> None:
        self._pending.clear()
        for widget in self.widgets.values():
            widget.hide()  # gone from this frame on, not only when the event loop deletes it
            widget.deleteLater()
        self.widgets.clear()
        for message in messages:
            streaming = message.id == streaming_id
            if streaming and streaming_tokens is not None:
                message.tokens = list(streaming_tokens)
                message.content = "".join(t.text for t in message.tokens)
            self.add_message(message, streaming=streaming, scroll=False)
        self.placeholder.setVisible(not messages)
        self._follow = True
        QTimer.singleShot(0, self, self.scroll_to_end)

    def add_message(self, message: Message, streaming: bool = False, scroll: bool = True) -> MessageWidget:
        widget = MessageWidget(
            message, colours=self.colours, streaming=streaming, show_reasoning=self.show_reasoning, parent=self.column
        )
        widget.edit_requested.connect(self.edit_requested)
        widget.regenerate_requested.connect(self.regenerate_requested)
        widget.compare_requested.connect(self.compare_requested)
        widget.variant_requested.connect(self.variant_requested)
        index = self.column_layout.count() - 1 - len(self.notices)  # before the notices and the stretch
        self.column_layout.insertWidget(index, widget)
        self.widgets[message.id] = widget
        self.placeholder.setVisible(False)
        self._update_last()
        if scroll:
            self._follow = True
            QTimer.singleShot(0, self, self.scroll_to_end)
        return widget

    def replace_message(self, message_id: int, message: Message) -> None:
        """Show message where message_id was (another alternate of an answer), keeping the scroll position."""
        old = self.widgets.get(message_id)
        if old is None:
            return
        index = self.column_layout.indexOf(old)
        self.widgets = {(message.id if i == message_id else i): w for i, w in self.widgets.items()}
        old.hide()
        old.deleteLater()
        widget = MessageWidget(message, colours=self.colours, show_reasoning=self.show_reasoning, parent=self.column)
        for name in ("edit_requested", "regenerate_requested", "compare_requested", "variant_requested"):
            getattr(widget, name).connect(getattr(self, name))
        self.column_layout.insertWidget(index, widget)
        self.widgets[message.id] = widget
        self._update_last()

    def remove_message(self, message_id: int) -> None:
        self._pending.pop(message_id, None)
        widget = self.widgets.pop(message_id, None)
        if widget is not None:
            widget.hide()
            widget.deleteLater()
        self._update_last()

    def message_widget(self, message_id: int) -> MessageWidget | None:
        return self.widgets.get(message_id)

    def queue_tokens(self, message_id: int, tokens: list[Token]) -> None:
        """Tokens for a streaming message; drawn on the next frame, batched."""
        self._pending.setdefault(message_id, []).extend(tokens)
        if not self._frame.isActive():
            self._frame.start()

    def queue_reasoning(self, message_id: int, text: str) -> None:
        """Thinking text for a streaming message (its section batches its own drawing)."""
        widget = self.widgets.get(message_id)
        if widget is not None:
            widget.append_reasoning(text)

    def set_show_reasoning(self, show: bool) -> None:
        self.show_reasoning = show
        for widget in self.widgets.values():
            widget.set_show_reasoning(show)

    def flush(self) -> None:
        self._frame.stop()
        self._draw_pending()

    def _draw_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for message_id, tokens in pending.items():
            widget = self.widgets.get(message_id)
            if widget is not None:
                widget.append_tokens(tokens)
        if pending:
            self.frames_drawn += 1

    def finish_message(self, message: Message) -> None:
        self.flush()
        widget = self.widgets.get(message.id)
        if widget is not None:
            widget.finish(message)
        self._update_last()

    def set_sources(self, message_id: int, sources: list) -> None:
        if (widget := self.message_widget(message_id)) is not None:
            widget.set_sources(sources)

    def set_tool_uses(self, message_id: int, uses: list) -> None:
        self.flush()  # the text said before the calls is drawn first
        if (widget := self.message_widget(message_id)) is not None:
            widget.set_tool_uses(uses)

    def set_live_stats(self, message_id: int, stats: AnswerStats) -> None:
        widget = self.widgets.get(message_id)
        if widget is not None:
            widget.set_live_stats(stats)

    def set_colours(self, colours: bool) -> None:
        self.colours = colours
        for widget in self.widgets.values():
            widget.set_colours(colours)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._update_last()

    def _update_last(self) -> None:
        ids = list(self.widgets)
        last_user = next((i for i in reversed(ids) if self.widgets[i].is_user), None)
        last_answer = ids[-1] if ids and not self.widgets[ids[-1]].is_user else None
        for message_id, widget in self.widgets.items():
            widget.set_last(message_id in (last_user, last_answer), self.busy)

    # -- notices ------------------------------------------------------------------------------

    def show_notice(self, text: str, kind: str = "error", actions=None) -> Notice:
        notice = Notice(text, kind, actions, self.column)
        notice.closed.connect(lambda: self.notices.remove(notice) if notice in self.notices else None)
        self.column_layout.insertWidget(self.column_layout.count() - 1, notice)
        self.notices.append(notice)
        self._follow = True
        QTimer.singleShot(0, self, self.scroll_to_end)
        return notice

    def clear_notices(self, kind: str | None = None) -> None:
        for notice in list(self.notices):
            if kind is None or notice.kind == kind:
                self.notices.remove(notice)
                notice.hide()
                notice.deleteLater()

    # -- scrolling ----------------------------------------------------------------------------

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _keep_following(self, _min: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)

    def _user_scrolled(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 4

    # -- layout and looks ---------------------------------------------------------------------

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        em = self.fontMetrics().horizontalAdvance("M")
        side = max(em, (self.viewport().width() - MAX_WIDTH_EM * em) // 2)
        top = self.fontMetrics().height()
        self.column_layout.setContentsMargins(side, top, side, top)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._restyle()

    def _restyle(self) -> None:
        pal = self.viewport().palette()
        pal.setColor(QPalette.ColorRole.Window, QGuiApplication.palette().color(QPalette.ColorRole.Base))
        self.viewport().setPalette(pal)
        self.viewport().setAutoFillBackground(True)
        self.column.setAutoFillBackground(False)
