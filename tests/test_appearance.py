"""View → Theme and text size: applied to the whole app, remembered, and undone exactly."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import json

from PySide6.QtWidgets import QApplication

from app.chat.rich_text import CodeBlock
from app.core.settings import Settings
from app.core.store import Store
from app.ui import theme
from app.ui.appearance import stepped
from tests.app_helpers import make_window  # noqa: F401 (a fixture)


def test_theme_and_text_size_apply_everywhere_are_saved_and_go_back(qtbot, make_window, isolated_home):
    app = QApplication.instance()
    style, palette, size = (
        app.style().name(),
        app.palette().color(app.palette().ColorRole.Window),
        app.font().pointSizeF(),
    )
    store = Store()
    conv = store.create_conversation("Code")
    store.add_message(conv.id, "user", "Print one.")
    store.add_message(conv.id, "assistant", "```python\nprint(1)\n```")
    store.close()
    window = make_window(wait=False)
    window.sidebar.select(conv.id)
    try:
        window.menus.themes["dark"].trigger()
        assert theme.is_dark() and app.style().name().lower() == "fusion"
        assert window.menus.larger_text.shortcut().toString() == "Ctrl+="
        window.menus.larger_text.trigger()
        assert abs(app.font().pointSizeF() - size * 1.1) < 0.05
        [block] = window.chat_view.message_widget(window.session.messages[-1].id).body.findChildren(CodeBlock)
        assert abs(block.view.font().pointSizeF() - size * 1.1) < 0.05  # code grows with the text
        saved = json.loads(Settings.default_path().read_text(encoding="utf-8"))
        assert (saved["theme"], saved["text_scale"]) == ("dark", 1.1)

        window.menus.actual_size.trigger()
        window.menus.themes["system"].trigger()
        assert app.style().name() == style and app.font().pointSizeF() == size
        assert app.palette().color(app.palette().ColorRole.Window) == palette
    finally:
        window.set_appearance("system", 1.0)


def test_text_steps_are_bounded_and_a_bad_theme_in_the_file_is_corrected(tmp_path):
    assert stepped(1.0, 1) == 1.1 and stepped(1.1, -1) == 1.0 and stepped(1.6, 0) == 1.0
    assert stepped(1.95, 3) == 2.0 and stepped(0.72, -2) == 0.7
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"theme": "purple", "text_scale": 9}), encoding="utf-8")
    settings = Settings.load(path)
    assert (settings.theme, settings.text_scale) == ("system", 2.0)
    assert any("theme" in n for n in settings.load_notices)
