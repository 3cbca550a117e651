"""The app's widgets without a model: Markdown and code blocks, streaming, charts, the input box."""

import sys

from PySide6.QtCore import QObject, QPoint, Qt
from PySide6.QtGui import QGuiApplication

from app import qt_compat
from app.chat.acceptance_chart import Histogram, RoundsChart, TimeSplitBar, _bins
from app.chat.chat_view import ChatView
from app.chat.composer import Composer
from app.chat.rich_text import CodeBlock, MessageBody, TextPane, split_markdown
from app.chat.stats_footer import StatsFooter
from app.core.figures import GREEDY_PARTING, SAMPLED_PARTING, compare_texts, comparison_text, figures
from app.core.store import Message, Token
from app.core.tool_steps import ToolStatus, ToolUse
from app.ui import theme
from engine.decoding.events import FinishReason
from engine.decoding.stats import AnswerStats

ANSWER = "Here:\n\n```python\ndef f():\n    return 1\n```\n\nDone, **bold**.\n~~~\nraw\n~~~"


def test_split_markdown_finds_fenced_code_blocks():
    parts = split_markdown(ANSWER)
    assert [(p.kind, p.language) for p in parts] == [
        ("markdown", ""),
        ("code", "python"),
        ("markdown", ""),
        ("code", ""),
    ]
    assert parts[1].text == "def f():\n    return 1" and parts[1].closed
    streaming = split_markdown("Text\n```js\nlet x")
    assert streaming[-1].kind == "code" and not streaming[-1].closed
    # A shorter fence does not close a longer one.
    assert split_markdown("````\n```\n````")[0].text == "```"


def test_finished_message_renders_markdown_and_code_blocks_with_a_copy_button(qtbot):
    body = MessageBody()
    qtbot.addWidget(body)
    body.set_content(ANSWER, [], streaming=False, colours=False)
    blocks = body.findChildren(CodeBlock)
    assert [b.code for b in blocks] == ["def f():\n    return 1", "raw"]
    assert blocks[0].view.font().fixedPitch() or blocks[0].view.font().styleHint() == theme.monospace().styleHint()
    blocks[0].copy_button.click()
    assert QGuiApplication.clipboard().text() == "def f():\n    return 1"
    assert blocks[0].copy_button.text() == "Copied"
    panes = [p for p in body.findChildren(TextPane) if not isinstance(p.parent(), CodeBlock)]
    assert any("bold" in p.toPlainText() and "**" not in p.toPlainText() for p in panes)


def test_streaming_appends_to_one_pane_and_renders_markdown_when_done(qtbot):
    body = MessageBody()
    qtbot.addWidget(body)
    body.set_content("", [], streaming=True, colours=False)
    pane = body._pane
    for i in range(200):
        body.append([Token(f"w{i} ", "target", i)])
    assert body._pane is pane  # the same widget the whole time: no re-layout of anything else
    assert pane.toPlainText().startswith("w0 w1") and "w199" in pane.toPlainText()
    body.finish(ANSWER, [Token(ANSWER, "target", 0)])
    assert body._pane is None and len(body.findChildren(CodeBlock)) == 2


def test_token_colours_give_each_token_a_background_and_a_tooltip(qtbot):
    body = MessageBody()
    qtbot.addWidget(body)
    body.token_tooltip = lambda i: f"token {i}"
    tokens = [Token("Hello", "target", 0), Token(" world", "draft", 1), Token("!", "lookup", 1)]
    body.set_content("Hello world!", tokens, streaming=False, colours=True)
    doc = body._pane.document()
    from PySide6.QtGui import QTextCursor

    cursor = QTextCursor(doc)
    cursor.setPosition(8)  # inside " world"
    fmt = cursor.charFormat()
    assert fmt.background().color() == theme.token_background("draft")
    assert fmt.property(0x100000 + 1) == 1
    cursor.setPosition(3)
    assert cursor.charFormat().background().style() == Qt.BrushStyle.NoBrush
    assert body._pane.token_tooltip(1) == "token 1"


def test_chat_view_batches_tokens_per_frame(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    message = Message(1, 1, "assistant", params={"target": "T"})
    view.add_message(message, streaming=True)
    for i in range(500):
        view.queue_tokens(1, [Token(f"{i} ", "target", i)])
    assert view.frames_drawn == 0  # nothing drawn per token
    qtbot.waitUntil(lambda: view.frames_drawn >= 1, timeout=2_000)
    assert view.frames_drawn == 1  # 500 tokens, one frame
    assert "499" in view.message_widget(1).body.text


def test_rounds_chart_bins_long_answers_and_describes_rounds(qtbot):
    rounds = [("draft", 4, 4, 3), ("none", 0, 0, 0), ("lookup", 2, 2, 2)] * 200
    chart = RoundsChart()
    qtbot.addWidget(chart)
    chart.resize(240, chart.height())
    chart.set_rounds(rounds)
    bins = _bins(len(rounds), 234)
    assert len(bins) * 3 <= 240 and bins[-1][1] == len(rounds)
    assert "Round 1: draft model, draft length 4" in chart.describe(0, 1)
    assert "drafted 4, accepted 3" in chart.describe(0, 1)
    assert "no draft" in chart.describe(1, 2)
    assert "Rounds 1–3" in chart.describe(0, 3)
    assert chart.round_at(5) is not None
    assert not chart.grab().isNull()
    few = RoundsChart()
    qtbot.addWidget(few)
    few.resize(300, few.height())
    few.set_rounds(rounds[:3])
    assert few.round_at(few.width() - 10) is None  # three thin bars, not three blocks
    hist, split = Histogram(), TimeSplitBar()
    qtbot.addWidget(hist)
    qtbot.addWidget(split)
    split.set_times(0.1, 0.3, 0.05, 0.5)
    assert not split.grab().isNull()
    assert abs(split.parts["other"] - 0.05) < 1e-9


def test_the_accepted_lengths_histogram_splits_each_bar_by_drafter(qtbot):
    """Under a legend where green is the draft model, a bar of lookup's rounds was drawn green all the same."""
    from engine import DrafterKind, Round

    hist = Histogram()
    qtbot.addWidget(hist)
    hist.resize(300, hist.height())
    rounds = [Round.of(r) for r in [("lookup", 3, 3, 3), ("draft", 4, 4, 3), ("none", 0, 0, 0), ("lookup", 8, 8, 0)]]
    hist.set_rounds(rounds)
    assert hist.toolTip().splitlines() == [
        "Rounds per accepted length:",
        "0 accepted: 1 round",
        "3 accepted: 2 rounds (prompt lookup 1, draft model 1)",
    ]
    image = hist.grab().toImage()
    colours = {image.pixelColor(x, y).name() for x in range(image.width()) for y in range(image.height())}
    pal = hist.palette()
    lookup, draft = (theme.source_colour(kind, pal).name() for kind in (DrafterKind.LOOKUP, DrafterKind.DRAFT_MODEL))
    assert lookup in colours and draft in colours
    # An answer stored with only its histogram: one neutral colour, no drafter's.
    hist.set_rounds([], {0: 2, 3: 5, 16: 1})
    image = hist.grab().toImage()
    pixels = [image.pixelColor(x, y).name() for x in range(image.width()) for y in range(image.height())]
    assert pixels.count(theme.subtle(pal).name()) > 200  # the bars (the axis labels' text has a few such pixels)
    assert lookup not in pixels and draft not in pixels
    assert "16 accepted: 1 round" in hist.toolTip()


def test_footer_figures_and_comparison():
    stats = AnswerStats(
        n_tokens=100, n_drafted=80, n_accepted=60, gen_s=2.0, ttft_s=0.25, target_step_s=0.03, rounds=[]
    )
    texts = [t for t, _tip in figures(stats)]
    assert texts == [
        "≈1.50× vs plain (estimate)",
        "75% of drafts accepted",
        "50.0 tok/s",
        "100 tokens",
        "first token 0.25 s",
    ]
    assert all(tip for _t, tip in figures(stats))
    assert compare_texts("abc", "abc") == (True, -1)
    assert compare_texts("abcd", "abXd") == (False, 2)
    assert compare_texts("ab", "abc") == (False, 2)
    # What a difference means, said by temperature: a near-tie at 0, the random draws above it.
    greedy = comparison_text({"measured_speedup": 1.2, "identical": False, "first_difference": 40, "temperature": 0})
    assert "texts differ from character 41" in greedy and GREEDY_PARTING in greedy
    sampled = comparison_text({"measured_speedup": 1.2, "identical": False, "first_difference": 3, "temperature": 0.7})
    assert GREEDY_PARTING not in sampled and SAMPLED_PARTING in sampled and "draft model" in sampled
    assert GREEDY_PARTING not in comparison_text({"measured_speedup": 1.2, "identical": True, "temperature": 0})


def test_footer_live_and_incomplete_states(qtbot):
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.set_stats(AnswerStats(n_tokens=3, rounds=[("none", 0, 0, 0)]), "streaming")
    assert not footer.compare_button.isEnabled()
    footer.set_stats(AnswerStats(n_tokens=3, rounds=[("none", 0, 0, 0)]), "incomplete")
    assert "Incomplete" in footer.state_label.text()


def test_enter_sends_shift_enter_is_a_new_line_and_up_edits(qtbot):
    composer = Composer()
    qtbot.addWidget(composer)
    sent, edits = [], []
    composer.send_requested.connect(sent.append)
    composer.edit_last_requested.connect(lambda: edits.append(1))
    qtbot.keyClick(composer.input, Qt.Key.Key_Up)
    assert edits == [1]
    qtbot.keyClicks(composer.input, "line one")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer.input, "line two")
    assert sent == [] and composer.text() == "line one\nline two"
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent == ["line one\nline two"]
    composer.set_busy(True)
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert len(sent) == 1 and composer.button.text() == "Stop"


def test_pyside_reference_leak_guard():
    # A correct call returns a new reference: no leak is reported for plain Python.
    assert not qt_compat.leaks(None, lambda: None)
    # Whatever this PySide6 does, many void calls and emits must not bring the interpreter down.
    obj = QObject()
    for _ in range(20_000):
        obj.setObjectName("x")
        obj.objectNameChanged.emit("y")
    assert sys.getrefcount(None) > 0
    chart = RoundsChart()
    chart.mapToGlobal(QPoint(0, 0))


def test_hovering_a_token_shows_its_tooltip(qtbot):
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    body = MessageBody()
    body.resize(400, 200)
    qtbot.addWidget(body)
    body.token_tooltip = lambda i: f"token number {i}"
    tokens = [Token("alpha ", "target", 0), Token("beta ", "draft", 1), Token("gamma", "lookup", 1)]
    body.set_content("alpha beta gamma", tokens, streaming=False, colours=True)
    body.show()
    pane = body._pane
    layout = pane.document().documentLayout()
    # The middle of "beta": find a point whose hit position is inside the second token.
    rect = layout.blockBoundingRect(pane.document().begin())
    x = next(
        x
        for x in range(int(rect.width()))
        if layout.hitTest(QPointF(x, rect.height() / 2), Qt.HitTestAccuracy.ExactHit) == 8
    )
    pos = QPoint(x, int(rect.height() / 2))
    QApplication.sendEvent(pane.viewport(), QHelpEvent(QEvent.Type.ToolTip, pos, pane.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=2_000)
    assert QToolTip.text() == "token number 1"
    QToolTip.hideText()


def test_an_answer_that_ends_having_written_nothing_says_so(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    answer = Message(1, 1, "assistant", params={"target": "T"})
    view.add_message(answer, streaming=True)
    note = view.message_widget(1).silent_label

    def shown(label) -> bool:
        return label.isVisibleTo(label.parent())

    assert not shown(note)  # still streaming: nothing to say yet
    read = ToolUse("call-1", "read_file", {"path": "notes.txt"}, "files", status=ToolStatus.DONE, result="v1.4")
    view.finish_message(
        Message(1, 1, "assistant", "\n", complete=True, finish_reason="stop", params={"target": "T"}, tool_uses=[read])
    )
    assert shown(note) and note.text() == "The model ended its answer after its tool calls without writing anything."
    view.add_message(Message(2, 1, "assistant", params={"target": "T"}), streaming=True)
    view.finish_message(Message(2, 1, "assistant", "", complete=True, finish_reason="stop", params={"target": "T"}))
    assert view.message_widget(2).silent_label.text() == "The model ended its answer without writing anything."
    view.add_message(Message(5, 1, "assistant", params={"target": "T"}), streaming=True)
    thought = Message(
        5, 1, "assistant", "", complete=True, finish_reason="stop", params={"target": "T"}, reasoning="Hm."
    )
    view.finish_message(thought)
    assert (
        view.message_widget(5).silent_label.text()
        == "The model ended its answer after thinking without writing anything."
    )
    # Words, or an answer stopped by the user, say nothing of the kind.
    view.add_message(Message(3, 1, "assistant", params={"target": "T"}), streaming=True)
    view.finish_message(Message(3, 1, "assistant", "v1.4", complete=True, finish_reason="stop", params={"target": "T"}))
    assert not shown(view.message_widget(3).silent_label)
    view.add_message(Message(4, 1, "assistant", params={"target": "T"}), streaming=True)
    stopped = Message(
        4, 1, "assistant", "", complete=True, finish_reason=FinishReason.CANCELLED, params={"target": "T"}
    )
    view.finish_message(stopped)
    assert not shown(view.message_widget(4).silent_label)
