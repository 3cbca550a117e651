"""Small QPainter charts of what speculation did over one answer (no plotting dependency).

RoundsChart: one bar per verification round. In "accepted" mode the outline is what the
drafter proposed and the filled part what the target accepted; in "draft_length" mode the bar
is the draft length asked of the drafter that round. Bars are coloured by drafter; rounds with
nothing drafted (plain steps) are a dot on the baseline. Many rounds are binned to fit.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from app.core.figures import DRAFTER_LABELS
from app.ui import theme
from engine import DrafterKind, Round, TokenSource

MIN_BAR_PX = 3.0


def _bins(n: int, width: float) -> list[tuple[int, int]]:
    """Split n rounds into consecutive (start, end) bins at least MIN_BAR_PX wide."""
    if n == 0:
        return []
    per_bin = max(1, math.ceil(n * MIN_BAR_PX / max(width, 1.0)))
    return [(i, min(i + per_bin, n)) for i in range(0, n, per_bin)]


class RoundsChart(QWidget):
    def __init__(self, kind: str = "accepted", parent: QWidget | None = None, lines: float = 2.6):
        super().__init__(parent)
        assert kind in ("accepted", "draft_length")
        self.kind = kind
        self.rounds: list[Round] = []
        self._lines = lines
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(round(self.fontMetrics().height() * lines))
        self.setMouseTracking(True)
        what = "accepted length" if kind == "accepted" else "draft length"
        self.setAccessibleName(f"Chart of the {what} per verification round")

    def set_rounds(self, rounds: Sequence[Round]) -> None:
        self.rounds = [Round.of(r) for r in rounds]
        self.setAccessibleDescription(self.summary())
        self.update()

    def summary(self) -> str:
        drafted = [r for r in self.rounds if r.drafted]
        if not drafted:
            return f"{len(self.rounds)} rounds, nothing drafted"
        accepted = sum(r.accepted for r in drafted)
        return (
            f"{len(self.rounds)} rounds, {len(drafted)} with drafts; mean accepted length "
            f"{accepted / len(drafted):.2f} of {sum(r.drafted for r in drafted) / len(drafted):.2f} drafted"
        )

    def sizeHint(self) -> QSize:
        return QSize(260, self.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(80, self.height())

    def _scale(self) -> int:
        if self.kind == "accepted":
            top = max((r.drafted for r in self.rounds), default=0)
        else:
            top = max((r.draft_length for r in self.rounds if r.drafter != DrafterKind.NONE), default=0)
        return max(top, 4)

    def _plot_rect(self) -> QRectF:
        return QRectF(3, 3, self.width() - 6, self.height() - 5)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        pal = self.palette()
        area = self._plot_rect()
        painter.fillRect(QRectF(self.rect()), theme.card(pal, 0.05))
        grid = theme.mix(pal.color(QPalette.ColorRole.Window), pal.color(QPalette.ColorRole.WindowText), 0.15)
        painter.setPen(QPen(grid, 1))
        painter.drawLine(area.bottomLeft(), area.bottomRight())
        if not self.rounds:
            painter.setPen(theme.subtle(pal))
            painter.drawText(area, Qt.AlignmentFlag.AlignCenter, "no rounds yet")
            return
        scale = self._scale()
        bins = _bins(len(self.rounds), area.width())
        slot = min(area.width() / len(bins), self._max_slot())
        gap = 1.0 if slot >= 4 else 0.0
        for i, (start, end) in enumerate(bins):
            chunk = self.rounds[start:end]
            x = area.left() + i * slot
            drafted_rounds = [r for r in chunk if r.drafter != DrafterKind.NONE and r.drafted > 0]
            if not drafted_rounds:
                painter.fillRect(
                    QRectF(x, area.bottom() - 2, max(slot - gap, 1), 2), theme.source_colour(TokenSource.TARGET, pal)
                )
                continue
            drafter = Counter(r.drafter for r in drafted_rounds).most_common(1)[0][0]
            colour = theme.source_colour(drafter, pal)
            n = len(chunk)
            if self.kind == "accepted":
                outline = sum(r.drafted for r in chunk) / n
                filled = sum(r.accepted for r in chunk) / n
            else:
                outline = filled = sum(r.draft_length for r in chunk if r.drafter != DrafterKind.NONE) / n
            h_out = area.height() * outline / scale
            h_in = area.height() * filled / scale
            w = max(slot - gap, 1.0)
            light = QColor(colour)
            light.setAlpha(70)
            painter.fillRect(QRectF(x, area.bottom() - h_out, w, h_out), light)
            painter.fillRect(QRectF(x, area.bottom() - h_in, w, h_in), colour)
        painter.setPen(theme.subtle(pal))
        font = painter.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.75, 6))
        painter.setFont(font)
        painter.drawText(
            area.adjusted(2, -1, -2, 0), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop, str(scale)
        )

    def _max_slot(self) -> float:
        # A few rounds stay thin bars rather than blocks across the whole chart.
        return self.fontMetrics().horizontalAdvance("M") * 1.2

    def round_at(self, x: float) -> tuple[int, int] | None:
        """The (start, end) rounds of the bar under x."""
        area = self._plot_rect()
        bins = _bins(len(self.rounds), area.width())
        if not bins or x < area.left():
            return None
        i = int((x - area.left()) / min(area.width() / len(bins), self._max_slot()))
        return bins[i] if i < len(bins) else None

    def describe(self, start: int, end: int) -> str:
        chunk = self.rounds[start:end]
        if end - start == 1:
            r = chunk[0]
            if r.drafter == DrafterKind.NONE or not r.drafted:
                return f"Round {start + 1}: no draft, the target decoded one token"
            return (
                f"Round {start + 1}: {DRAFTER_LABELS[r.drafter]}, draft length {r.draft_length}\n"
                f"drafted {r.drafted}, accepted {r.accepted}"
                + (", all accepted plus a bonus token" if r.accepted == r.drafted else "")
            )
        drafted_rounds = [r for r in chunk if r.drafted]
        if not drafted_rounds:
            return f"Rounds {start + 1}–{end}: no drafts (plain steps)"
        mean_d = sum(r.drafted for r in drafted_rounds) / len(drafted_rounds)
        mean_a = sum(r.accepted for r in drafted_rounds) / len(drafted_rounds)
        mean_k = sum(r.draft_length for r in drafted_rounds) / len(drafted_rounds)
        by = ", ".join(f"{DRAFTER_LABELS[d]} {n}" for d, n in Counter(r.drafter for r in chunk).most_common())
        return (
            f"Rounds {start + 1}–{end} ({by})\nmean draft length {mean_k:.1f}, "
            f"drafted {mean_d:.1f}, accepted {mean_a:.1f}"
        )

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            hit = self.round_at(event.pos().x())
            if hit:
                QToolTip.showText(event.globalPos(), self.describe(*hit), self)
            else:
                QToolTip.showText(event.globalPos(), self.summary(), self)
            return True
        return super().event(event)


class Histogram(QWidget):
    """Rounds per accepted length (drafted rounds only), with the counts written on the bars. Each bar is
    split by drafter, in the colours of the legend beside it; an answer stored with no rounds (only its
    histogram) is drawn in one neutral colour."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.hist: dict[int, Counter] = {}  # accepted length -> rounds per drafter (None: not known)
        self.setFixedHeight(round(self.fontMetrics().height() * 3.4))
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("Histogram of accepted lengths")

    def set_rounds(self, rounds: Sequence[Round], hist: dict[int, int] | None = None) -> None:
        """The answer's rounds; hist (accepted length -> rounds) stands in where no rounds were kept."""
        self.hist = {}
        for r in rounds:
            if r.drafter != DrafterKind.NONE and r.drafted:
                self.hist.setdefault(r.accepted, Counter())[r.drafter] += 1
        if not rounds:
            self.hist = {length: Counter({None: n}) for length, n in (hist or {}).items() if n}
        self.setToolTip(
            "Rounds per accepted length:\n" + "\n".join(self._line(k) for k in sorted(self.hist))
            if self.hist
            else "No drafted rounds"
        )
        self.update()

    def _line(self, length: int) -> str:
        by = self.hist[length]
        total = sum(by.values())
        line = f"{length} accepted: {total} {'round' if total == 1 else 'rounds'}"
        if len(by) > 1:
            line += " (" + ", ".join(f"{DRAFTER_LABELS[d]} {n}" for d, n in by.most_common()) + ")"
        return line

    def sizeHint(self) -> QSize:
        return QSize(260, self.height())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        pal = self.palette()
        fm = self.fontMetrics()
        label_h = fm.height()
        area = QRectF(0, label_h, self.width(), self.height() - 2 * label_h)
        if not self.hist:
            painter.setPen(theme.subtle(pal))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "no drafted rounds")
            return
        top_len = max(self.hist)
        top_count = max(sum(by.values()) for by in self.hist.values())
        slot = min(area.width() / (top_len + 1), fm.horizontalAdvance("0000") * 1.4)
        wide = fm.horizontalAdvance("00") + 2
        every = 1 if slot >= wide else 2 if 2 * slot >= wide else 4
        for length in range(top_len + 1):
            by = self.hist.get(length, Counter())
            count = sum(by.values())
            x = area.left() + length * slot
            bottom = area.bottom()
            for drafter in [*DrafterKind, None]:  # stacked in the legend's order
                if by[drafter]:
                    h = area.height() * by[drafter] / top_count
                    colour = theme.source_colour(drafter, pal) if drafter is not None else theme.subtle(pal)
                    painter.fillRect(QRectF(x + 1, bottom - h, slot - 2, h), colour)
                    bottom -= h
            if length % every == 0:
                painter.setPen(theme.subtle(pal))
                label = QRectF(x - slot, area.bottom(), 3 * slot, label_h)
                painter.drawText(label, Qt.AlignmentFlag.AlignCenter, str(length))
            if count:
                painter.setPen(pal.color(QPalette.ColorRole.WindowText))
                painter.drawText(QRectF(x, bottom - label_h, slot, label_h), Qt.AlignmentFlag.AlignCenter, str(count))


TIME_PARTS = (("drafting", "draft"), ("verifying", "verify"), ("sampling", "sample"), ("other", "other"))


def time_colours(pal: QPalette) -> dict[str, QColor]:
    return {
        "draft": theme.source_colour(DrafterKind.DRAFT_MODEL, pal),
        "verify": QColor("#e0902f") if not theme.is_dark(pal) else QColor("#f0a845"),
        "sample": QColor("#9a5fd0") if not theme.is_dark(pal) else QColor("#b98af0"),
        "other": theme.mix(pal.color(QPalette.ColorRole.Window), pal.color(QPalette.ColorRole.WindowText), 0.3),
    }


class TimeSplitBar(QWidget):
    """One stacked bar: how the generation time split between drafting, verifying and sampling."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.parts: dict[str, float] = {}
        self.setFixedHeight(round(self.fontMetrics().height() * 0.9))
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("Time split between drafting, verifying and sampling")

    def set_times(self, draft: float, verify: float, sample: float, total: float) -> None:
        other = max(total - draft - verify - sample, 0.0)
        self.parts = {"draft": draft, "verify": verify, "sample": sample, "other": other}
        self.setToolTip(
            "\n".join(f"{name}: {self.parts[key] * 1000:.0f} ms" for name, key in TIME_PARTS if key in self.parts)
        )
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(260, self.height())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        total = sum(self.parts.values())
        if total <= 0:
            return
        colours = time_colours(self.palette())
        x = 0.0
        for _name, key in TIME_PARTS:
            w = self.width() * self.parts.get(key, 0.0) / total
            painter.fillRect(QRectF(x, 0, w, self.height()), colours[key])
            x += w
