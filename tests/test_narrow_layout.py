"""Every control stays in view at every window width from 640 px up: the window grabs its widgets
at several sizes and checks that none lies outside the visible area."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QAbstractButton, QApplication

from app.core.store import Store, Token
from engine import AnswerStats, Round
from tests.app_helpers import make_window, smol_settings  # noqa: F401 (a fixture)

CODE = "```python\ndef add(a: int, b: int) -> int:\n    return a + b  # " + "a long comment " * 8 + "\n```"
ANSWER = f"Here it is:\n\n{CODE}\n\nAnd that is all."


def stored_conversation() -> None:
    store = Store()
    conv = store.create_conversation("Add two numbers in Python, with a test and a very long title that goes on")
    store.add_message(conv.id, "user", "Write a function that adds two numbers, and a test for it.")
    names = {"target": "Qwen2.5 Coder 1.5B Instruct GGUF", "draft": "Qwen2.5 Coder 0.5B Instruct AWQ"}
    m = store.add_message(conv.id, "assistant", complete=False, params={**names, "spec": {"mode": "auto"}})
    stats = AnswerStats(
        n_tokens=40, n_drafted=20, n_accepted=12, gen_s=2.0, target_step_s=0.06, rounds=[Round("lookup", 4, 4, 3)] * 5
    )
    store.append_tokens(m.id, 0, [Token(ANSWER, "target", 0)], ANSWER)
    store.finish_message(m.id, ANSWER, "stop", stats)
    store.close()


def outside(widget, area) -> bool:
    """Whether any part of widget lies left or right of area (a widget it is inside of)."""
    top_left = widget.mapTo(area, QPoint(0, 0))
    rect = QRect(top_left, widget.size())
    return rect.left() < 0 or rect.right() >= area.width()


def test_every_control_is_in_view_from_640_px_up(qtbot, make_window, smollm2_path):
    stored_conversation()
    window = make_window(smol_settings(smollm2_path))
    window.sidebar.select(window.sidebar.ids()[0])
    for width in (640, 800, 1200, 1600):
        window.resize(width, 600)
        qtbot.waitUntil(lambda width=width: window.width() == width, timeout=3_000)
        QApplication.processEvents()
        viewport = window.chat_view.viewport()
        buttons = [b for b in window.chat_view.widget().findChildren(QAbstractButton) if b.isVisible()]
        names = {b.text() for b in buttons}
        assert {"Copy", "Edit", "Regenerate", "Details", "Compare with plain decoding"} <= names
        clipped = [(b.text(), b.mapTo(viewport, QPoint(0, 0)).x()) for b in buttons if outside(b, viewport)]
        assert not clipped, f"at {width} px: {clipped}"
        picker = window.header.model_picker
        header = [
            window.header.colours_button,
            window.header.settings_button,
            window.composer.button,
            picker.eject_button,
        ]
        header += [
            picker.target_combo,
            picker.draft_combo,
            window.composer.chat_settings_button,
            window.composer.attach_button,
        ]
        assert not [b.text() for b in header if outside(b, window)], f"at {width} px"
        assert window.status.memory.isVisible() and not outside(window.status.memory, window.status)
