"""An answer's tool calls shown where the model made them (app/chat/answer_text.py): the text before a
pass's calls, their blocks, the text after their results; streamed, finished and coloured token by token.
Real widgets; the answer is written out here as the app's controller records one."""

from __future__ import annotations

from app.bridge.tool_turn import joined
from app.chat.answer_text import AnswerText, token_cut
from app.core.store import Token
from app.core.tool_steps import ToolStatus, ToolUse

FIRST = ["I", " will", " read", " the", " notes", " first", "."]
SECOND = ["\n", "They", " name", " the", " Orchid", " room", "."]  # a pass may begin with a break
READ = ToolUse("call-1", "read_file", {"path": "notes.txt"}, "files", step=0)


def tokens(texts: list[str], round_: int = 0) -> list[Token]:
    return [Token(t, "lookup" if i % 2 else "target", round_) for i, t in enumerate(texts)]


def the_answer() -> tuple[str, list[Token], list[ToolUse]]:
    """Two passes, as AnswerController records them: the first ends with a call, made after its text."""
    first = "".join(FIRST)
    content = joined(joined("", first), "".join(SECOND).strip())
    use = ToolUse(**{**READ.to_dict(), "at": len(first), "status": ToolStatus.DONE, "result": "Orchid room"})
    return content, tokens(FIRST) + tokens(SECOND, 1), [use]


def order(widget: AnswerText) -> list[str]:
    """What the answer shows, top to bottom: "text: ..." or "calls: name, ..." (hidden parts left out)."""
    shown = []
    for i in range(widget.layout().count()):
        item = widget.layout().itemAt(i).widget()
        if item is None or item.isHidden():
            continue
        if item in widget.bodies:
            shown.append(f"text: {item.plain_text()}")
        else:
            shown.append("calls: " + ", ".join(b.use.name for b in item.blocks))
    return shown


def test_a_finished_answer_shows_each_call_between_what_was_said_before_and_after_it(qtbot):
    content, toks, uses = the_answer()
    widget = AnswerText()
    qtbot.addWidget(widget)
    widget.set_content(content, toks, streaming=False, colours=False, uses=uses)
    widget.show()
    assert order(widget) == [
        "text: I will read the notes first.",
        "calls: read_file",
        "text: They name the Orchid room.",
    ]
    assert widget.plain_text() == content  # Copy takes the whole answer

    # Token colours: each stretch holds its own tokens, and a tooltip names the token in the whole answer.
    asked = []
    widget.token_tooltip = lambda index: asked.append(index) or f"token {index}"
    widget.set_colours(True)
    assert [t.text for t in widget.bodies[0].tokens] == FIRST
    assert [t.text for t in widget.bodies[1].tokens] == SECOND
    assert widget.bodies[1]._pane.token_tooltip(1) == "token 8" and asked == [8]
    assert order(widget)[1] == "calls: read_file"


def test_a_pass_that_calls_at_once_shows_no_empty_text_and_calls_of_one_pass_stay_together(qtbot):
    other = ToolUse("call-2", "search", {"query": "orchid"}, "files", step=0)
    answer = ["The", " Orchid", " room", "."]
    widget = AnswerText()
    qtbot.addWidget(widget)
    widget.set_content("The Orchid room.", tokens(answer), streaming=False, colours=True, uses=[READ, other])
    widget.show()
    assert order(widget) == ["calls: read_file, search", "text: The Orchid room."]
    assert len(widget.groups) == 1 and [t.text for t in widget.bodies[1].tokens] == answer


def test_while_streaming_a_pass_s_calls_go_below_its_text_and_the_next_pass_streams_after_them(qtbot):
    content, toks, uses = the_answer()
    widget = AnswerText()
    qtbot.addWidget(widget)
    widget.set_content("", [], streaming=True, colours=False)
    widget.show()
    widget.append(toks[: len(FIRST)])
    running = ToolUse(**{**uses[0].to_dict(), "status": ToolStatus.PENDING, "result": ""})
    widget.set_tool_uses([running])  # the pass ended with its call: waiting for approval
    assert order(widget) == ["text: I will read the notes first.", "calls: read_file"]
    block = widget.blocks[0]
    block.toggle()  # the user unfolds it while it runs

    widget.set_tool_uses(uses)  # its result came: the same block, still unfolded
    assert widget.blocks == [block] and block.expanded and "Orchid room" in block.details.text()
    widget.append(toks[len(FIRST) :])  # the next pass streams below the call
    assert order(widget)[-1] == "text: \nThey name the Orchid room."

    widget.finish(content, toks, uses)
    assert order(widget) == [
        "text: I will read the notes first.",
        "calls: read_file",
        "text: They name the Orchid room.",
    ]
    assert widget.blocks[0].expanded  # laid out again as finished, and still as the user left it


def test_an_answer_without_tool_calls_is_one_text(qtbot):
    widget = AnswerText()
    qtbot.addWidget(widget)
    widget.set_content("Hello.", tokens(["Hello", "."]), streaming=False, colours=False)
    widget.show()
    assert order(widget) == ["text: Hello."] and widget.groups == [] and widget.blocks == []


def test_a_cut_is_found_in_the_tokens_by_visible_characters():
    toks = tokens(["Read", " it", ".", "\n\n", "Done", "."])
    assert token_cut(toks, "Read it.\n\nDone.", len("Read it.")) == 3
    assert token_cut(toks, "Read it.\n\nDone.", 0) == 0
    assert token_cut(toks, "Read it.\n\nDone.", 999) == len(toks)
