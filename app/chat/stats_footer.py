"""Under each answer: what speculation did and what it was worth.

The footer line (estimated speedup, draft acceptance, tokens/s, tokens, time to first token),
a chart of accepted lengths per round, "Compare with plain decoding", and a details panel with
the drafter and draft length per round, the accepted-length histogram and the time split.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.acceptance_chart import TIME_PARTS, Histogram, RoundsChart, TimeSplitBar, time_colours
from app.core.figures import (
    DRAFTER_LABELS,
    comparison_text,
    drafter_summary,
    estimate_text,
    figures,
    history_dropped_note,
    remote_summary,
    results_cut_note,
    settings_summary,
)
from app.ui import theme
from app.ui.flow_layout import FlowLayout
from engine import AnswerStats, DrafterKind


class StatsFooter(QWidget):
    compare_requested = Signal()
    plain_text_toggled = Signal(bool)  # show the comparison's plain-decoding text beside the answer

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.stats: AnswerStats | None = None
        self.params: dict = {}
        self.comparison: dict | None = None
        self.state = "done"
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(3)

        self.state_label = QLabel()
        self.state_label.setVisible(False)
        self.state_label.setWordWrap(True)
        layout.addWidget(self.state_label)

        self.figures_row = FlowLayout(h_spacing=self.fontMetrics().horizontalAdvance("M"))
        self.figure_labels: list[QLabel] = []
        layout.addLayout(self.figures_row)

        row = QHBoxLayout()
        row.setSpacing(8)
        self.chart_caption = QLabel("accepted per round")
        self.chart_caption.setFont(self._small_font())
        row.addWidget(self.chart_caption)
        self.chart = RoundsChart("accepted", self)
        self.chart.setMaximumWidth(self.fontMetrics().horizontalAdvance("M") * 26)
        self.chart.setToolTip("Accepted length per verification round")
        row.addWidget(self.chart, 1)
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setArrowType(Qt.ArrowType.RightArrow)
        self.details_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_button.setAutoRaise(True)
        self.details_button.setToolTip("Drafter and draft length per round, accepted lengths, where the time went")
        self.details_button.toggled.connect(self._toggle_details)
        row.addWidget(self.details_button)
        self.compare_button = QToolButton()
        self.compare_button.setText("Compare with plain decoding")
        self.compare_button.setAutoRaise(True)
        self.compare_button.setToolTip(
            "Run this answer again with speculation off and the same seed, then show the measured speedup "
            "and whether the two texts are identical"
        )
        self.compare_button.clicked.connect(self.compare_requested)
        row.addWidget(self.compare_button)
        row.addStretch(1)
        layout.addLayout(row)

        comparison_row = QHBoxLayout()
        self.comparison_label = QLabel()
        self.comparison_label.setWordWrap(True)
        self.comparison_label.setVisible(False)
        self.comparison_label.setTextFormat(Qt.TextFormat.RichText)
        comparison_row.addWidget(self.comparison_label, 1)
        self.plain_button = QToolButton()
        self.plain_button.setText("Show plain text")
        self.plain_button.setCheckable(True)
        self.plain_button.setAutoRaise(True)
        self.plain_button.setToolTip("The text plain decoding wrote, beside this answer (under it in a narrow window)")
        self.plain_button.setVisible(False)
        self.plain_button.toggled.connect(self.plain_text_toggled)
        comparison_row.addWidget(self.plain_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(comparison_row)

        self.details: DetailsPanel | None = None  # built on first open
        self._details_layout = layout
        self._restyle()

    # -- updates ------------------------------------------------------------------------------

    def set_stats(self, stats: AnswerStats | None, state: str = "done") -> None:
        """state: streaming, done, stopped, incomplete, length, context, error."""
        self.stats, self.state = stats, state
        notes = {
            "stopped": "Stopped.",
            "incomplete": "Incomplete: Specula stopped before this answer finished. This is what was shown.",
            "length": "Reached the maximum answer length (Settings → Max tokens).",
            "context": "The context window is full (Settings → Context size).",
        }
        note = notes.get(state, "")
        if stats and stats.n_history_dropped:  # where the user looks, not only in Details
            note = "\n".join(n for n in (note, history_dropped_note(stats.n_history_dropped)) if n)
        if stats and stats.n_results_cut:
            note = "\n".join(n for n in (note, results_cut_note(stats.n_results_cut)) if n)
        self.state_label.setText(note)
        self.state_label.setVisible(bool(note))
        remote = bool(stats and stats.remote)  # no local plain run to compare a remote answer with
        self.compare_button.setEnabled(state not in ("streaming", "incomplete", "error") and bool(stats) and not remote)
        measured = self.comparison if state != "streaming" else None
        items = figures(stats, self.params, measured) if stats and stats.n_tokens else []
        self._set_figures(items)
        self.chart.set_rounds(stats.rounds if stats else [])
        drafted = bool(stats and stats.n_drafted)  # an empty chart of zeros says nothing
        self.chart.setVisible(drafted)
        self.chart_caption.setVisible(drafted)
        self.details_button.setVisible(bool(stats and (stats.rounds or stats.remote)))
        if self.details is not None and self.details.isVisible() and stats:
            self.details.set_stats(stats, self.params)

    def set_params(self, params: dict) -> None:
        self.params = params

    def set_comparison(self, comparison: dict | None, running: bool = False) -> None:
        if running:
            self.comparison_label.setText(
                "Comparing: decoding this answer again with speculation off… (you can go on chatting; Esc stops it)"
            )
        elif comparison:
            self.comparison_label.setText(comparison_text(comparison))
        self.comparison_label.setVisible(running or bool(comparison))
        self.plain_button.setVisible(not running and "plain_text" in (comparison or {}))
        self.compare_button.setEnabled(not running and bool(self.stats) and not (self.stats and self.stats.remote))
        if comparison and comparison is not self.comparison:
            self.comparison = comparison
            self.set_stats(self.stats, self.state)  # the measured figure replaces the estimate

    def _set_figures(self, items: list[tuple[str, str]]) -> None:
        while len(self.figure_labels) < len(items):
            label = QLabel()
            label.setFont(self._small_font())
            theme.tint(label)
            self.figure_labels.append(label)
            self.figures_row.addWidget(label)
        for i, label in enumerate(self.figure_labels):
            if i < len(items):
                label.setText(items[i][0])
                label.setToolTip(items[i][1])
                label.setVisible(True)
            else:
                label.setVisible(False)
        self.figures_row.invalidate()

    def figure_texts(self) -> list[str]:
        return [label.text() for label in self.figure_labels if not label.isHidden()]

    def _toggle_details(self, on: bool) -> None:
        self.details_button.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        if on and self.details is None:
            self.details = DetailsPanel(self)
            self._details_layout.addWidget(self.details)
        if self.details is not None:
            if on and self.stats:
                self.details.set_stats(self.stats, self.params)
            self.details.setVisible(on)

    def _small_font(self):
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.92)
        return font

    def _restyle(self) -> None:
        for label in (self.chart_caption, self.comparison_label):
            theme.tint(label)
        theme.tint(self.state_label, theme.warning_colour)


class DetailsPanel(QFrame):
    """The details view of one answer's speculation."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        grid = QGridLayout(self)
        grid.setContentsMargins(10, 8, 10, 8)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(4)
        grid.setColumnStretch(1, 1)
        self._headings: dict[QWidget, QLabel] = {}

        def row(heading: str, widget: QWidget, align: Qt.AlignmentFlag | None = None) -> QWidget:
            r = grid.rowCount()
            if heading:
                label = QLabel(f"<b>{heading}</b>")
                label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
                grid.addWidget(label, r, 0)
                self._headings[widget] = label
            if isinstance(widget, QLabel):
                widget.setWordWrap(True)
            grid.addWidget(widget, r, 1, align or Qt.AlignmentFlag(0))
            return widget

        self.accepted_chart = row("Accepted per round", RoundsChart("accepted", self, lines=3.5))
        self.length_chart = row("Draft length per round", RoundsChart("draft_length", self, lines=3.0))
        self.legend = row("", QLabel())
        self.drafters = row("Drafters", QLabel())
        self.histogram = row("Accepted lengths", Histogram(self), Qt.AlignmentFlag.AlignLeft)
        self.histogram.setMaximumWidth(self.fontMetrics().horizontalAdvance("M") * 30)
        self.time_bar = row("Time", TimeSplitBar(self))
        self.time_legend = row("", QLabel())
        self.prompt = row("Prompt", QLabel())
        self.settings = row("Settings", QLabel())
        self.estimate = row("Estimate", QLabel())
        for label in self.findChildren(QLabel):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def set_stats(self, stats: AnswerStats, params: dict) -> None:
        local = not stats.remote  # a remote server reports no rounds: its figures in words instead
        charts = (self.accepted_chart, self.length_chart, self.legend, self.histogram, self.time_bar)
        for widget in (*charts, self.time_legend, self.estimate):
            widget.setVisible(local)
            if widget in self._headings:
                self._headings[widget].setVisible(local)
        self._headings[self.drafters].setText("<b>Drafters</b>" if local else "<b>Remote server</b>")
        self.settings.setText(settings_summary(params, stats))
        if not local:
            self.drafters.setText(remote_summary(stats))
            self.prompt.setText(f"{stats.n_prompt_tokens} tokens, as the server counted them")
            return
        pal = self.palette()
        self.accepted_chart.set_rounds(stats.rounds)
        self.length_chart.set_rounds(stats.rounds)

        def swatch(colour) -> str:
            return f"<span style='color:{theme.css(colour)}'>■</span>"

        self.legend.setText(
            "  ".join(f"{swatch(theme.source_colour(key, pal))} {DRAFTER_LABELS[key]}" for key in DrafterKind)
            + "   (light: drafted, solid: accepted)"
        )
        self.drafters.setText(drafter_summary(stats))
        self.histogram.set_rounds(stats.rounds, stats.accepted_hist)
        self.time_bar.set_times(stats.t_draft, stats.t_verify, stats.t_sample, stats.gen_s)
        colours = time_colours(pal)
        parts = self.time_bar.parts
        total = sum(parts.values()) or 1.0
        self.time_legend.setText(
            "  ".join(
                f"{swatch(colours[key])} {name} {parts.get(key, 0) * 1000:.0f} ms ({parts.get(key, 0) / total:.0%})"
                for name, key in TIME_PARTS
            )
        )
        dropped = (
            f"; {stats.n_history_dropped} old messages left out to fit the context" if stats.n_history_dropped else ""
        ) + (f"; the middle of {stats.n_results_cut} tool results left out to fit it" if stats.n_results_cut else "")
        self.prompt.setText(
            f"{stats.n_prompt_tokens} tokens, {stats.n_prompt_evaluated} evaluated in {stats.prompt_s:.2f} s "
            f"({stats.prompt_tps:.0f} tok/s), the rest reused from the cache{dropped}"
        )
        self.estimate.setText(estimate_text(stats))
