"""The status bar keeps the model line and the memory figure in view: notices do not replace the
model line, and narrow windows elide long texts instead of pushing the memory figure out."""

from PySide6.QtWidgets import QMainWindow

from app.ui.status_bar import StatusBar
from engine import EngineInfo

LONG_INFO = EngineInfo(
    "Qwen2.5 Coder 1.5B Instruct GGUF with a rather long name",
    "Qwen2.5 Coder 0.5B Instruct AWQ",
    "CPU",
    0,
    28,
    0,
    4096,
    2,
    1_500_000_000,
    {},
)


def window_with_status_bar(qtbot, width: int) -> tuple[QMainWindow, StatusBar]:
    window = QMainWindow()
    bar = StatusBar(window)
    window.setStatusBar(bar)
    qtbot.addWidget(window)
    window.resize(width, 300)
    window.show()
    bar.set_engine(LONG_INFO)
    return window, bar


def inside(bar: StatusBar, widget) -> bool:
    rect = widget.geometry()
    return widget.isVisible() and rect.width() > 0 and bar.rect().contains(rect)


def test_a_notice_shows_beside_the_model_line_and_goes_away(qtbot):
    _window, bar = window_with_status_bar(qtbot, 1400)
    bar.showMessage("Stopped.", 200)
    assert bar.currentMessage() == "Stopped."
    assert inside(bar, bar.notice) and inside(bar, bar.models) and inside(bar, bar.backend)
    assert not bar.models.is_elided()
    qtbot.waitUntil(lambda: not bar.notice.isVisible(), timeout=2_000)
    assert bar.currentMessage() == "" and inside(bar, bar.models)


def test_narrow_windows_elide_the_model_line_and_keep_the_memory_figure(qtbot):
    for width in (640, 800):
        _window, bar = window_with_status_bar(qtbot, width)
        bar.showMessage("Stopped.", 0)
        qtbot.waitUntil(lambda bar=bar: inside(bar, bar.memory), timeout=2_000)
        assert bar.memory.text().startswith("Memory: models 1.50 GB")
        assert inside(bar, bar.models) and inside(bar, bar.notice)
        assert bar.models.is_elided()  # shortened with "…", the full text in its tooltip
        assert LONG_INFO.target_name in bar.models.toolTip()
