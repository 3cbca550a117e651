"""The status bar: target and draft, backend and GPU layers, short notices, loading progress, memory in use.

Notices ("Stopped.") go to a label of their own instead of QStatusBar's message area, which would
hide the model line while it shows; long texts are elided, so the memory figure stays visible in
narrow windows."""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from app.ui.elided_label import ElidedLabel

MEMORY_REFRESH_MS = 2000
MODELS_TIP = "Target model (answers) and draft model (proposes tokens for the target to verify)"
BACKEND_TIP = "Where the models run: the GPU and how many layers of each model are on it, or the CPU"


def process_memory() -> int | None:
    """Resident memory of this process in bytes (None where it cannot be read cheaply)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    if sys.platform == "darwin":
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS (the peak)
    return None


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def where_text(info) -> str:
    """The backend part of the status line: the GPU and its layers, or the CPU and, briefly, why."""
    if info.backend == "CPU":
        # A CPU-only build is a choice; a GPU backend that found nothing usable is worth a word.
        return "CPU" if not info.gpu_note or "built for the CPU only" in info.gpu_note else "CPU (no usable GPU)"
    device = info.device if len(info.device) <= 32 else info.device[:31] + "…"
    return f"{info.backend} · {device} · {info.gpu_layers()}"


def where_tip(info) -> str:
    if info.backend == "CPU":
        return f"Running on the CPU: {info.gpu_note}." if info.gpu_note else "Running on the CPU."
    memory = f"{gigabytes(info.vram_free)} of {gigabytes(info.vram_total)} GPU memory free with the models loaded"
    return f"{info.backend}: {info.device}; {memory}." + (f"\n{info.gpu_note}." if info.gpu_note else "")


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.models = ElidedLabel("No model loaded")
        self.models.setToolTip(MODELS_TIP)
        self.backend = ElidedLabel()
        self.backend.setToolTip(BACKEND_TIP)
        self.notice = QLabel()  # short-lived messages: showMessage() lands here
        self.notice.setAccessibleName("Status message")
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(self.clearMessage)
        self.stage = QLabel()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(self.fontMetrics().horizontalAdvance("M") * 12)
        self.progress.setMaximumHeight(self.fontMetrics().height())
        self.memory = QLabel()
        self.memory.setToolTip("Memory used by the loaded models (weights and contexts), and by the whole app")
        self.addWidget(self.models)
        self.addWidget(self.backend)
        self.addWidget(self.notice, 1)  # takes the spare width, so the others keep their natural size
        self.addPermanentWidget(self.stage)
        self.addPermanentWidget(self.progress)
        self.addPermanentWidget(self.memory)
        self.set_progress(None)
        self.clearMessage()
        self.model_bytes = 0
        self._timer = QTimer(self)
        self._timer.setInterval(MEMORY_REFRESH_MS)
        self._timer.timeout.connect(self.refresh_memory)
        self._timer.start()
        self.refresh_memory()

    def set_engine(self, info) -> None:
        """info: engine.decoding.chat_engine.EngineInfo, or None when nothing is loaded."""
        if info is None:
            self.models.setText("No model loaded")
            self.models.setToolTip(MODELS_TIP)
            self.backend.setText("")
            self.backend.setToolTip(BACKEND_TIP)
            self.model_bytes = 0
        else:
            draft = f"  +  draft {info.draft_name}" if info.draft_name else "  ·  no draft model"
            self.models.setText(f"{info.target_name}{draft}")
            note = f"\n{info.speculation_note[:1].upper()}{info.speculation_note[1:]}." if info.speculation_note else ""
            self.models.setToolTip(f"{self.models.text()}\nMemory: {info.memory_text()}{note}\n{MODELS_TIP}")
            amx = {"avoided": " · AMX off", "on": " · AMX on"}.get(info.amx, "")
            self.backend.setText(f"{where_text(info)} · {info.n_threads} threads{amx} · context {info.n_ctx:,}")
            self.backend.setToolTip(f"{BACKEND_TIP}\n{where_tip(info)}\n{info.cpu_weights}")
            self.model_bytes = info.memory_bytes
        self.refresh_memory()

    def showMessage(self, text: str, timeout: int = 0) -> None:  # noqa: N802 (Qt's name, kept for callers)
        """A notice beside the model line (which stays), cleared after timeout ms (0: until replaced)."""
        self.notice.setText(text)
        self.notice.setVisible(bool(text))
        if timeout > 0:
            self._notice_timer.start(timeout)
        else:
            self._notice_timer.stop()

    def clearMessage(self) -> None:  # noqa: N802
        self.notice.clear()
        self.notice.setVisible(False)

    def currentMessage(self) -> str:  # noqa: N802
        return self.notice.text()

    def set_progress(self, stage: str | None, fraction: float = 0.0) -> None:
        """A stage with a fraction shows the bar; None hides it."""
        visible = stage is not None
        self.stage.setText(stage or "")
        self.stage.setVisible(visible)
        self.progress.setVisible(visible)
        self.progress.setValue(round(max(0.0, min(fraction, 1.0)) * 1000))

    def refresh_memory(self) -> None:
        rss = process_memory()
        parts = []
        if self.model_bytes:
            parts.append(f"models {gigabytes(self.model_bytes)}")
        if rss:
            parts.append(f"app {gigabytes(rss)}")
        self.memory.setText("Memory: " + ", ".join(parts) if parts else "")
