"""The desktop app end to end: pytest-qt on the offscreen platform, the real engine on SmolLM2."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.bridge.model_controller import EngineState
from app.core.store import Store
from engine.decoding.stats import AnswerStats
from tests.app_helpers import ask, make_window, smol_settings, wait_answer, wait_comparison  # noqa: F401 (a fixture)

LONG = "Count from 1 to 300, one number per line."


def test_enter_streams_tokens_then_the_footer_shows_statistics_and_the_chart_has_data(qtbot, make_window, smollm2_path):
    # The draft model, forced: auto may rightly choose plain decoding on a CPU, and then there is no chart.
    window = make_window(smol_settings(smollm2_path, max_tokens=120, drafter_mode="draft", draft_length=4))
    assert window.models.state == EngineState.READY
    assert "SmolLM2 135M" in window.status.models.text() and "CPU" in window.status.backend.text()
    seen_streaming = []
    window.host.worker.token_received.connect(
        lambda *_: seen_streaming.append(window.session.busy and window.answers.active is not None)
    )
    message = ask(qtbot, window, LONG, wait=False)
    widget = window.chat_view.message_widget(window.session.messages[-1].id)
    # Tokens reach the screen while the answer is still being written.
    qtbot.waitUntil(lambda: len(widget.body.tokens) >= 3 and window.session.busy, timeout=60_000)
    assert widget.streaming and widget.body.text
    wait_answer(qtbot, window)
    assert any(seen_streaming)
    message = window.session.messages[-1]
    assert message.role == "assistant" and message.complete and message.finish_reason in ("stop", "length")
    assert window.chat_view.frames_drawn >= 1
    texts = " ".join(widget.footer.figure_texts())
    assert "tok/s" in texts and "tokens" in texts and "(estimate)" in texts and "first token" in texts
    assert widget.footer.chart.rounds and widget.footer.chart.isVisible() is not False
    assert widget.footer.chart.rounds == message.stats.rounds
    # What the store holds is what was shown.
    stored = window.store.message(message.id)
    assert stored.content == message.content == widget.body.plain_text()
    assert "".join(t.text for t in stored.tokens) == stored.content
    assert stored.stats.n_tokens == message.stats.n_tokens > 0
    # Details: the drafter/draft-length chart, time split and histogram.
    widget.footer.details_button.setChecked(True)
    details = widget.footer.details
    assert details.isVisible() and details.length_chart.rounds == message.stats.rounds
    assert "ms" in details.time_legend.text()
    # Copy a message.
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text() == message.content


def test_stop_mid_answer_with_esc_then_ask_again(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=500))
    ask(qtbot, window, LONG, wait=False)
    qtbot.waitUntil(
        lambda: window.answers.active is not None and len(window.answers.active.tokens) >= 8, timeout=60_000
    )
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    qtbot.keyClick(window.composer.input, Qt.Key.Key_Escape)
    wait_answer(qtbot, window)
    stopped = window.session.messages[-1]
    assert stopped.finish_reason == "cancelled"
    assert 8 <= stopped.stats.n_tokens < 500
    widget = window.chat_view.message_widget(stopped.id)
    assert widget.footer.state_label.text() == "Stopped."
    assert window.composer.button.text() == "Send"
    again = ask(qtbot, window, "Say hello.")
    assert again.finish_reason in ("stop", "length") and again.content
    assert len(window.store.messages(window.session.conversation.id)) == 4


def test_stop_button_takes_effect(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=500))
    ask(qtbot, window, LONG, wait=False)
    qtbot.waitUntil(
        lambda: window.answers.active is not None and len(window.answers.active.tokens) >= 4, timeout=60_000
    )
    assert window.composer.button.text() == "Stop"
    window.composer.button.click()
    wait_answer(qtbot, window)
    assert window.session.messages[-1].finish_reason == "cancelled"


def test_regenerate_keeps_alternates_and_any_message_can_be_edited(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=24, temperature=0.8))
    first = ask(qtbot, window, "Name a colour.")
    widget = window.chat_view.message_widget(first.id)
    assert widget.regenerate_button.isVisible() and not widget.variant_label.isVisible()
    first_figures = widget.footer.figure_texts()
    widget.regenerate_button.click()
    wait_answer(qtbot, window)
    second = window.session.messages[-1]
    assert second.id != first.id and second.complete and second.role == "assistant"
    assert first.id not in window.chat_view.widgets
    assert second.params["sampling"]["seed"] != first.params["sampling"]["seed"]  # a fresh seed per answer
    # The first answer is kept as an alternate: ‹ 2/2 ›, and ‹ goes back to it with its statistics.
    assert window.store.message(first.id).content == first.content
    widget = window.chat_view.message_widget(second.id)
    assert widget.variant_label.isVisible() and widget.variant_label.text() == "2/2"
    assert widget.previous_button.isEnabled() and not widget.next_button.isEnabled()
    widget.previous_button.click()
    assert window.session.messages[-1].id == first.id and window.session.messages[-1].content == first.content
    back = window.chat_view.message_widget(first.id)
    assert back.variant_label.text() == "1/2" and back.footer.figure_texts() == first_figures
    assert second.id not in window.chat_view.widgets
    assert [m.id for m in window.store.messages(window.session.conversation.id)] == [
        window.session.messages[0].id,
        first.id,
    ]
    # Regenerating from the first adds a third; all three survive a reopen.
    back.regenerate_button.click()
    wait_answer(qtbot, window)
    third = window.session.messages[-1]
    assert window.chat_view.message_widget(third.id).variant_label.text() == "3/3"
    assert window.store.messages(window.session.conversation.id)[-1].variants == [first.id, second.id, third.id]

    # Any message of yours can be edited, not only the last; sending replaces what follows it.
    ask(qtbot, window, "And a fruit?")
    user = window.session.messages[0]
    edit = window.chat_view.message_widget(user.id).edit_button
    assert edit.isVisible() and edit.isEnabled()
    edit.click()
    assert window.composer.text() == "Name a colour." and window.composer.banner.isVisible()
    assert "replaces the 3 messages after it" in window.composer.banner_label.text()
    window.composer.input.selectAll()
    answer = ask(qtbot, window, "Name a fruit.")
    stored = window.store.messages(window.session.conversation.id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[0].content == "Name a fruit." and stored[1].id == answer.id and answer.complete
    assert stored[1].variants == [answer.id]  # the old alternates went with the answers they belonged to
    assert not window.composer.banner.isVisible()


def test_close_and_reopen_brings_back_conversations_and_statistics(qtbot, make_window, smollm2_path):
    settings = smol_settings(smollm2_path, max_tokens=40)
    window = make_window(settings)
    answer = ask(qtbot, window, "What is 2 + 2?")
    figures = window.chat_view.message_widget(answer.id).footer.figure_texts()
    title = window.session.conversation.title
    window.close()

    again = make_window(settings)
    assert [window_title for window_title in _sidebar_titles(again)] == [title]
    again.sidebar.select(again.sidebar.ids()[0])
    assert again.session.conversation is not None and again.session.conversation.title == title
    restored = again.session.messages[-1]
    assert restored.content == answer.content and restored.stats.rounds == answer.stats.rounds
    widget = again.chat_view.message_widget(restored.id)
    assert widget.footer.figure_texts() == figures
    assert widget.footer.chart.rounds == answer.stats.rounds
    assert [t.source for t in restored.tokens] == [t.source for t in answer.tokens]


def _sidebar_titles(window):
    return window.sidebar.titles()


def test_token_colours_legend_and_tooltips(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=40, drafter_mode="draft", draft_length=4))
    answer = ask(qtbot, window, "List the first ten prime numbers.")
    widget = window.chat_view.message_widget(answer.id)
    assert not window.header.legend.isVisible()
    title_width = window.header.title_label.width()
    qtbot.keyClick(window.composer.input, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert window.header.colours_button.isChecked() and window.header.legend.isVisible()
    assert "draft model" in window.header.legend.text() and "prompt lookup" in window.header.legend.text()
    # The legend has a line of its own: the chat's title beside the model picker keeps its room.
    QGuiApplication.processEvents()
    assert window.header.legend.y() > window.header.title_label.y()
    assert window.header.title_label.width() == title_width
    assert widget.body.colours
    sources = {t.source for t in answer.tokens}
    assert "draft" in sources  # the target drafting for itself is accepted
    # Each token carries its index in its format; the tooltip names its source and round.
    index = next(i for i, t in enumerate(answer.tokens) if t.source == "draft" and t.text.strip())
    tip = widget.token_tooltip(index)
    assert "Draft model" in tip and "Round" in tip and "accepted" in tip
    assert window.settings.show_token_colours  # persisted
    window.header.colours_button.setChecked(False)
    assert not widget.body.colours


def test_compare_with_plain_decoding_shows_the_measured_speedup(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=32))
    answer = ask(qtbot, window, "List the first ten prime numbers.")
    widget = window.chat_view.message_widget(answer.id)
    widget.footer.compare_button.click()
    assert window.answers.comparing is not None
    wait_comparison(qtbot, window)
    comparison = window.store.message(answer.id).comparison
    assert comparison["measured_speedup"] > 0 and comparison["plain_tps"] > 0
    assert isinstance(comparison["identical"], bool)
    assert comparison["seed"] == answer.params["sampling"]["seed"]
    label = widget.footer.comparison_label
    assert label.isVisible() and "Measured against plain decoding" in label.text()
    assert ("identical" in label.text()) == comparison["identical"]


def test_engine_load_error_shows_a_message_and_the_app_keeps_working(qtbot, make_window, isolated_home):
    bad = isolated_home / "broken.gguf"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"this is not a model")
    window = make_window(smol_settings(str(bad)))
    assert window.models.state == EngineState.FAILED
    notice = window.chat_view.notices[-1]
    assert "could not be loaded" in notice.text() and "GGUF" in notice.text()
    answer = ask(qtbot, window, "Hello?")
    assert answer.finish_reason == "error" and "No model is loaded" in answer.error
    assert window.chat_view.message_widget(answer.id).error_label.isVisible()


def test_context_full_is_a_message_in_the_chat(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, context_size=256))
    window.send_message("word " * 400)
    wait_answer(qtbot, window)
    answer = window.session.messages[-1]
    assert answer.finish_reason == "context" and "context" in answer.error.lower()
    widget = window.chat_view.message_widget(answer.id)
    assert widget.error_label.isVisible() and "Settings" in widget.error_label.text()
    ok = ask(qtbot, window, "Hi")  # still works after the error
    assert ok.role == "assistant" and ok.complete


def test_sidebar_search_rename_delete_and_undo(qtbot, make_window, isolated_home):
    store = Store()
    a = store.create_conversation("Prime numbers")
    b = store.create_conversation("Soup")
    store.add_message(b.id, "user", "How do I make tomato soup?")
    store.close()
    window = make_window(wait=False)
    assert sorted(_sidebar_titles(window)) == ["Prime numbers", "Soup"]
    window.sidebar.search.setText("tomato")
    qtbot.waitUntil(lambda: _sidebar_titles(window) == ["Soup"], timeout=3_000)
    window.sidebar.search.clear()
    qtbot.waitUntil(lambda: len(_sidebar_titles(window)) == 2, timeout=3_000)
    window.session.rename_conversation(a.id, "Primes")
    window.refresh_sidebar()
    assert "Primes" in _sidebar_titles(window)
    window.session.delete_conversation(b.id)
    assert _sidebar_titles(window) == ["Primes"] and window.sidebar.undo_bar.isVisible()
    window.sidebar.undo_button.click()
    assert sorted(_sidebar_titles(window)) == ["Primes", "Soup"]
    assert window.session.conversation.id == b.id


def test_export_writes_markdown_and_json(qtbot, make_window, smollm2_path, tmp_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=16))
    answer = ask(qtbot, window, "Say hi.")
    window.write_export(window.session.conversation, "markdown", tmp_path / "c.md")
    window.write_export(window.session.conversation, "json", tmp_path / "c.json")
    assert answer.content.strip()[:10] in (tmp_path / "c.md").read_text()
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["messages"][1]["stats"]["n_tokens"] == answer.stats.n_tokens
    assert AnswerStats.from_dict(data["messages"][1]["stats"]).rounds == answer.stats.rounds


def test_first_start_without_models_shows_the_welcome_panel(qtbot, make_window, smollm2_path, monkeypatch):
    from engine.models import starter

    calls = []

    def fake_assemble(dest_dir=None, progress=None, cancel=None):
        calls.append(1)
        for done in (0, 50, 100):
            progress(done, 100)
        return smollm2_path, smollm2_path

    monkeypatch.setattr(starter, "assemble_pair", fake_assemble)
    window = make_window(wait=False)
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.welcome, timeout=5_000)
    assert window.welcome.starter_button.isEnabled() == starter.starter_available()
    assert window.welcome.add_button.isEnabled()
    window.assemble_starter()
    qtbot.waitUntil(lambda: window.models.state == EngineState.READY, timeout=120_000)
    assert calls and window.pages.currentWidget() is window.chat_page
    assert window.settings.target.path == smollm2_path


def test_add_a_gguf_file_from_the_welcome_panel(qtbot, make_window, smollm2_path):
    window = make_window(wait=False)
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.welcome, timeout=5_000)
    window.welcome.add_file_requested.emit(smollm2_path)
    qtbot.waitUntil(lambda: window.models.state == EngineState.READY, timeout=120_000)
    assert window.settings.target.path == smollm2_path
    assert window.store is not None and window.pages.currentWidget() is window.chat_page


@pytest.mark.parametrize("dark", [False, True])
def test_renders_in_light_and_dark_palettes(qtbot, make_window, smollm2_path, dark, tmp_path):
    from PySide6.QtWidgets import QApplication

    from app.ui import theme

    app = QApplication.instance()
    original = app.palette()
    if dark:
        app.setPalette(theme.dark_palette())
    try:
        window = make_window(smol_settings(smollm2_path, max_tokens=24, show_token_colours=True))
        ask(qtbot, window, "Write a one-line Python hello world.")
        assert theme.is_dark(window.palette()) == dark
        image = window.grab().toImage()
        assert not image.isNull() and image.width() > 400
        # The chat background follows the palette.
        pixel = image.pixelColor(image.width() // 2, image.height() // 2)
        assert (pixel.lightness() < 128) == dark
    finally:
        app.setPalette(original)


def test_load_progress_reaches_the_status_bar(qtbot, make_window, smollm2_path):
    stages = []
    window = make_window(smol_settings(smollm2_path), wait=False)
    window.host.worker.load_progress.connect(lambda stage, _f: stages.append(stage))
    qtbot.waitUntil(lambda: window.models.state == EngineState.READY, timeout=120_000)
    qtbot.waitUntil(lambda: "Ready" in stages, timeout=5_000)
    assert "Measuring this machine" in stages
    assert not window.status.progress.isVisible()
    assert "MB" in window.status.memory.text() or "GB" in window.status.memory.text()


def test_a_decode_error_mid_answer_is_a_message_and_the_app_keeps_working(qtbot, make_window, smollm2_path):
    from engine.errors import DecodeError

    window = make_window(smol_settings(smollm2_path, max_tokens=200))
    runner = window.host.worker.engine.target  # idle now: safe to patch from this thread
    real_eval, calls = runner.eval, []

    def failing_eval(tokens, n_logits=1, **options):
        calls.append(1)
        if len(calls) == 6:
            raise DecodeError("llama_decode failed (code -3) at position 60.")
        return real_eval(tokens, n_logits, **options)

    runner.eval = failing_eval
    answer = ask(qtbot, window, LONG)
    runner.eval = real_eval
    assert answer.finish_reason == "error" and "llama_decode failed" in answer.error
    assert "answer so far is kept" in answer.error  # the engine's hint
    widget = window.chat_view.message_widget(answer.id)
    assert widget.error_label.isVisible() and widget.body.text == answer.content
    assert ask(qtbot, window, "Say hi.").finish_reason in ("stop", "length")


def test_an_unexpected_exception_in_the_worker_is_a_message_not_a_dead_thread(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=16))
    engine = window.host.worker.engine
    real_chat = engine.chat

    def broken_chat(*args, **kwargs):
        yield from ()
        raise RuntimeError("llama_decode returned -1")  # what llama-cpp-python raises

    engine.chat = broken_chat
    answer = ask(qtbot, window, "Hello")
    engine.chat = real_chat
    assert answer.finish_reason == "error" and "RuntimeError" in answer.error
    assert window.host.thread.isRunning()
    assert ask(qtbot, window, "Say hi.").finish_reason in ("stop", "length")


def test_switching_conversations_while_an_answer_streams(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=400))
    ask(qtbot, window, LONG, wait=False)
    streaming_conv = window.session.conversation.id
    qtbot.waitUntil(
        lambda: window.answers.active is not None and len(window.answers.active.tokens) >= 5, timeout=60_000
    )
    window.session.new_conversation()
    assert window.chat_view.widgets == {} and window.session.busy
    qtbot.waitUntil(lambda: len(window.answers.active.tokens) >= 15, timeout=60_000)
    window.session.open_conversation(streaming_conv)
    answer_id = window.answers.active.message.id
    widget = window.chat_view.message_widget(answer_id)
    assert widget.streaming and len(widget.body.tokens) >= 15  # caught up with what streamed meanwhile
    n = len(widget.body.tokens)
    qtbot.waitUntil(lambda: len(widget.body.tokens) > n, timeout=60_000)  # and keeps streaming
    window.answers.stop()
    wait_answer(qtbot, window)
    assert widget.body.text == window.store.message(answer_id).content


def test_closing_mid_answer_keeps_it_as_stopped(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=400))
    ask(qtbot, window, LONG, wait=False)
    qtbot.waitUntil(
        lambda: window.answers.active is not None and len(window.answers.active.tokens) >= 5, timeout=60_000
    )
    answer_id = window.answers.active.message.id
    window.close()
    assert not window.host.thread.isRunning()
    store = Store()
    stored = store.message(answer_id)
    store.close()
    assert stored.complete and stored.finish_reason == "cancelled" and len(stored.tokens) >= 5


def test_a_theme_change_at_run_time_restyles_everything(qtbot, make_window, smollm2_path):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from app.chat.rich_text import TextPane
    from app.ui import theme

    app = QApplication.instance()
    original = app.palette()
    window = make_window(smol_settings(smollm2_path, max_tokens=24))
    answer = ask(qtbot, window, "Write a one-line Python hello world.")
    widget = window.chat_view.message_widget(answer.id)
    try:
        app.setPalette(theme.dark_palette())
        dark = QGuiApplication.palette()
        chart, label = widget.footer.chart, widget.footer.figure_labels[0]
        qtbot.waitUntil(lambda: chart.palette().color(QPalette.ColorRole.Window).lightness() < 128, timeout=3_000)
        assert label.palette().color(QPalette.ColorRole.WindowText) == theme.subtle(dark)
        # Switching to token colours replaces the text at once: no stale pane stays on screen.
        window.header.colours_button.setChecked(True)

        def visible():
            return [p for p in widget.body.findChildren(TextPane) if p.isVisible()]

        qtbot.waitUntil(lambda: widget.body.bodies[0]._pane in visible(), timeout=3_000)
        assert visible() == [widget.body.bodies[0]._pane]
    finally:
        app.setPalette(original)
