"""Tools in the chat window (issue 32): a chat offers its MCP servers' tools, every call is asked of the user
in a real dialog, the answer goes on from the result, and the call is shown, stored, exported and sent
again. Real widgets, the starter pair (Qwen2.5-Coder 1.5B drafted by 0.5B, greedy, under the tool grammar),
real MCP servers over stdio: the workspace server on a temporary folder, and tests/mcp_servers.py for a
tool that hangs and one that takes its server down."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from app.core.settings import ModelSettings, Settings
from app.core.tool_steps import ToolStatus
from engine import FinishReason
from tests.app_helpers import ask, make_window, wait_answer  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parent.parent
SYSTEM = (
    "You are a helpful assistant with tools for the user's files. When a question is about a file, "
    "call a tool first, then answer the user in plain words from the tool's result."
)
QUESTION = "When is the meeting? It is written in notes.txt."  # the 1.5B model reads, then answers
WAIT_MS = 300_000  # a bound for a slow, shared CPU; nothing is timed


@pytest.fixture
def servers(isolated_home, tmp_path):
    """mcp.json with the workspace server ("files", on a folder holding notes.txt) and the test server."""
    from engine.mcp import McpConfig, ServerConfig, save_config

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("The meeting moved to Thursday at 3 pm in room Orchid.\n")
    python = sys.executable
    files = ServerConfig(
        "files", command=python, args=("-m", "engine.mcp.workspace_server", str(workspace)), cwd=str(REPO)
    )
    test = ServerConfig("test", command=python, args=(str(REPO / "tests" / "mcp_servers.py"),), cwd=str(REPO))
    save_config(McpConfig(servers={"files": files, "test": test}))
    return workspace


def qwen_settings(qwen_paths) -> Settings:
    target, draft = qwen_paths
    return Settings(
        target=ModelSettings(target),
        draft=ModelSettings(draft),
        context_size=4096,
        temperature=0.0,
        max_tokens=160,
        system_prompt=SYSTEM,
    )


def tick(window, server: str) -> None:
    """Tick a server in the Tools button's menu, as the user does."""
    action = next(a for a in window.composer.tools_button.menu().actions() if a.text() == server)
    action.trigger()


def approval(qtbot, window):
    """The approval dialog the window shows for the call the model made (fails if it answered without one)."""

    def asked_or_ended() -> bool:
        dialog = window.approvals.dialog
        return (dialog is not None and dialog.isVisible()) or not window.session.busy

    qtbot.waitUntil(asked_or_ended, timeout=WAIT_MS)
    assert window.approvals.dialog is not None, f"no tool was called: {window.session.messages[-1].content!r}"
    return window.approvals.dialog


def allow_until_answered(qtbot, window) -> None:
    """Click Allow once on each further call until the answer ends."""
    from PySide6.QtCore import Qt

    def settled() -> bool:
        dialog = window.approvals.dialog
        if dialog is not None and dialog.isVisible():
            qtbot.mouseClick(dialog.once_button, Qt.MouseButton.LeftButton)
        return not window.session.busy

    qtbot.waitUntil(settled, timeout=WAIT_MS * 3)


def test_a_tool_call_is_approved_run_and_answered_from(qtbot, make_window, servers, qwen_paths, tmp_path):
    from PySide6.QtCore import Qt

    from app.core.export import to_json, to_markdown

    window = make_window(qwen_settings(qwen_paths))
    passes = []  # each pass's own figures, as the engine ends it
    window.host.worker.answer_finished.connect(lambda _request, done: passes.append(done.stats))
    asked = []  # what each pass of the model was sent
    answer_on_engine = window.host.answer
    window.host.answer = lambda messages, *args, **kwargs: (
        asked.append(messages) or answer_on_engine(messages, *args, **kwargs)
    )
    with qtbot.waitSignal(window.mcp.server_started, timeout=WAIT_MS):  # ticked, it starts
        tick(window, "files")
    assert window.session.chat_settings.mcp_servers == ["files"]
    assert "files" in window.composer.tools_button.text()
    assert window.models.info.tools_native  # Qwen's template renders tools: no note in the menu
    assert all(a.isEnabled() for a in window.composer.tools_button.menu().actions() if a.text())

    # The server runs, so the meter counts its tools' descriptions: the template puts them in the prompt.
    window.composer.set_text(QUESTION)
    with qtbot.waitSignal(window.context.counted, timeout=WAIT_MS) as counted:
        window.context.count_now()
    count = counted.args[0]
    assert count.n_tools > 100 and f"{count.n_tools:,} describe the tools" in window.composer.meter.toolTip()
    window.composer.set_text("")

    ask(qtbot, window, QUESTION, wait=False)
    dialog = approval(qtbot, window)
    assert dialog.use.server == "files" and dialog.use.name in ("read_file", "search")
    assert json.loads(dialog.arguments.toPlainText()) == dialog.use.arguments  # the full arguments, as JSON
    assert "notes.txt" in dialog.arguments.toPlainText()
    qtbot.mouseClick(dialog.once_button, Qt.MouseButton.LeftButton)
    allow_until_answered(qtbot, window)  # the model may look further before it answers

    answer = window.session.messages[-1]
    assert all(u.status == ToolStatus.DONE for u in answer.tool_uses)
    assert "Orchid" in answer.tool_uses[0].result
    # The model went on with the result (what it makes of it is the 1.5B model's business).
    follow_up = asked[1]
    assert follow_up[-1].role == "tool" and "Orchid" in follow_up[-1].content
    assert follow_up[-2].tool_calls[0].name == answer.tool_uses[0].name
    assert answer.finish_reason != FinishReason.TOOL_CALLS and answer.error is None
    # Its figures are the whole turn's: every pass of the model, the tool calls' tokens too.
    assert len(passes) == len(asked) >= 2
    assert passes[0].n_prompt_tokens == count.n_tokens  # what the meter said is what the model read first
    assert answer.stats.n_tokens == sum(p.n_tokens for p in passes)
    assert answer.stats.rounds == [r for p in passes for r in p.rounds]

    # Shown as a folded block, unfolding to the arguments and the result.
    widget = window.chat_view.message_widget(answer.id)
    block = widget.body.blocks[0]
    assert widget.body.groups[0].isVisible() and not block.expanded
    assert answer.tool_uses[0].name in block.line.text() and "files" in block.line.text()
    window.resize(900, 700)
    qtbot.wait(100)  # laid out at that size
    window.grab().save(str(tmp_path / "tool_block_folded.png"))
    block.toggle()
    assert block.expanded and "Orchid" in block.details.text() and "Arguments" in block.details.text()
    qtbot.wait(50)
    window.grab().save(str(tmp_path / "tool_block.png"))
    print("screenshots:", tmp_path)

    # Stored, exported, and sent again as it happened on the next turn.
    stored = window.store.messages(window.session.conversation.id)[-1]
    assert stored.tool_uses == answer.tool_uses
    markdown = to_markdown(window.session.conversation, [stored])
    assert f"Tool call: {answer.tool_uses[0].name} on files" in markdown and "Orchid" in markdown
    exported = json.loads(to_json(window.session.conversation, [stored]))
    assert exported["messages"][0]["tool_uses"][0]["arguments"] == answer.tool_uses[0].arguments

    from app.bridge.answer_controller import chat_messages

    chat = chat_messages(window.session.messages, SYSTEM)
    roles = [m.role for m in chat]
    n = len(answer.tool_uses)
    assert roles[: 2 + 2 * n] == ["system", "user", *["assistant", "tool"] * n] and roles[2 + 2 * n :] in (
        [],
        ["assistant"],
    )
    assert chat[2].tool_calls[0].name == answer.tool_uses[0].name and "Orchid" in chat[3].content


def test_deny_ends_the_turn_and_keeps_everything(qtbot, make_window, servers, qwen_paths):
    from PySide6.QtCore import Qt

    window = make_window(qwen_settings(qwen_paths))
    tick(window, "files")
    ask(qtbot, window, QUESTION, wait=False)
    dialog = approval(qtbot, window)
    qtbot.mouseClick(dialog.deny_button, Qt.MouseButton.LeftButton)
    wait_answer(qtbot, window)

    answer = window.session.messages[-1]
    assert [u.status for u in answer.tool_uses] == [ToolStatus.DENIED]
    assert "denied" in answer.error.lower()
    widget = window.chat_view.message_widget(answer.id)
    assert widget.error_label.isVisible() and "denied" in widget.error_label.text().lower()
    assert "denied" in widget.body.blocks[0].line.text()
    stored = window.store.messages(window.session.conversation.id)[-1]
    assert stored.tool_uses[0].status == ToolStatus.DENIED and stored.complete


def test_regenerating_an_answer_that_called_tools_asks_again_and_keeps_the_first(
    qtbot, make_window, servers, qwen_paths
):
    from PySide6.QtCore import Qt

    window = make_window(qwen_settings(qwen_paths))
    asked = []  # what each pass of the model was sent
    answer_on_engine = window.host.answer
    window.host.answer = lambda messages, *args, **kwargs: (
        asked.append(messages) or answer_on_engine(messages, *args, **kwargs)
    )
    tick(window, "files")
    ask(qtbot, window, QUESTION, wait=False)
    qtbot.mouseClick(approval(qtbot, window).deny_button, Qt.MouseButton.LeftButton)
    wait_answer(qtbot, window)
    first = window.session.messages[-1]
    assert [u.status for u in first.tool_uses] == [ToolStatus.DENIED]

    window.session.regenerate(first.id)
    dialog = approval(qtbot, window)  # the call is made and asked again, not replayed from the first answer
    assert dialog.use.id != first.tool_uses[0].id
    qtbot.mouseClick(dialog.deny_button, Qt.MouseButton.LeftButton)
    wait_answer(qtbot, window)
    second = window.session.messages[-1]
    assert second.id != first.id and second.variants == [first.id, second.id]
    assert [m.role for m in asked[1]] == ["system", "user"]  # nothing of the first answer's call was sent
    window.session.show_variant(second.id, first.id)
    shown = window.session.messages[-1]
    assert shown.id == first.id and [u.status for u in shown.tool_uses] == [ToolStatus.DENIED]


def test_a_hanging_tool_times_out_and_always_allow_is_remembered(qtbot, make_window, servers, qwen_paths):
    from PySide6.QtCore import Qt

    from engine.mcp import load_config, save_config

    config = load_config()  # the tool waits 30 s; its server's entry allows a call 1 s
    config.servers["test"] = dataclasses.replace(config.servers["test"], timeout_s=1)
    save_config(config)
    window = make_window(qwen_settings(qwen_paths))
    tick(window, "test")
    ask(qtbot, window, "Call the slow tool with seconds set to 30.", wait=False)
    dialog = approval(qtbot, window)
    assert dialog.use.name == "slow"
    qtbot.mouseClick(dialog.always_button, Qt.MouseButton.LeftButton)
    wait_answer(qtbot, window)

    answer = window.session.messages[-1]
    assert answer.tool_uses[0].status == ToolStatus.TIMED_OUT
    assert "did not answer within 1 s" in answer.error and "raise test's Time limit" in answer.error
    assert window.session.chat_settings.allowed_tools == ["test/slow"]  # asked no more in this chat


def test_stop_while_a_tool_runs_cancels_the_call_and_keeps_the_answer(qtbot, make_window, servers, qwen_paths):
    from PySide6.QtCore import Qt

    window = make_window(qwen_settings(qwen_paths))  # the default limit (60 s): Stop, not the limit, ends it
    tick(window, "test")
    ask(qtbot, window, "Call the slow tool with seconds set to 30.", wait=False)
    dialog = approval(qtbot, window)
    qtbot.mouseClick(dialog.once_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.answers.turn is not None and window.answers.turn.waiting.value == "tool")
    assert window.composer.button.text() == "Stop"
    qtbot.mouseClick(window.composer.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.session.busy, timeout=10_000)  # not the tool's 30 s

    answer = window.session.messages[-1]
    assert answer.finish_reason == FinishReason.CANCELLED and answer.complete
    assert [u.status for u in answer.tool_uses] == [ToolStatus.CANCELLED]
    stored = window.store.messages(window.session.conversation.id)[-1]
    assert stored.tool_uses[0].status == ToolStatus.CANCELLED and stored.complete
    assert not window.mcp.failure("test")  # the server is fine: the next call may use it


def test_a_crashed_server_ends_the_turn_with_its_message(qtbot, make_window, servers, qwen_paths):
    from PySide6.QtCore import Qt

    window = make_window(qwen_settings(qwen_paths))
    tick(window, "test")
    ask(qtbot, window, "Call the crash tool.", wait=False)
    dialog = approval(qtbot, window)
    assert dialog.use.name == "crash"
    qtbot.mouseClick(dialog.once_button, Qt.MouseButton.LeftButton)
    wait_answer(qtbot, window)

    answer = window.session.messages[-1]
    assert answer.tool_uses[0].status == ToolStatus.FAILED
    assert "test" in answer.error and answer.complete
    assert window.mcp.failure("test")  # started afresh when a chat needs it next


def test_the_tools_button_lists_the_servers_and_follows_the_editor(qtbot, make_window, servers):
    from engine.mcp import load_config, save_config

    window = make_window(Settings(), wait=False)
    names = lambda: [a.text() for a in window.composer.tools_button.menu().actions() if a.isCheckable()]  # noqa: E731
    assert names() == ["files", "test"] and window.composer.tools_button.text() == "Tools"  # none ticked
    config = load_config()
    del config.servers["test"]
    save_config(config)
    window.mcp_servers_changed.emit()  # the MCP servers editor saved mcp.json
    assert names() == ["files"]
    assert not window.mcp.started  # listing servers starts none


def test_the_tools_menu_says_when_the_model_s_template_has_no_tools(qtbot, make_window, servers, smollm2_path):
    from app.chat.tools_button import NO_TOOLS_NOTE
    from tests.app_helpers import smol_settings

    window = make_window(smol_settings(smollm2_path))  # SmolLM2's template renders no tools
    assert window.models.info.tools_native is False
    button = window.composer.tools_button
    note = button.menu().actions()[0]
    assert note.text() == NO_TOOLS_NOTE and not note.isEnabled() and "less reliably" in button.toolTip()
    assert [a.text() for a in button.menu().actions() if a.isCheckable()] == ["files", "test"]


def test_opening_a_chat_starts_its_servers(qtbot, make_window, servers):
    """A stored chat's servers start as it is opened, as they do when ticked; another chat's do not."""
    window = make_window(Settings(), wait=False)
    with_tools = window.store.create_conversation("Files", {"mcp_servers": ["files"]})
    without = window.store.create_conversation("Plain")
    window.refresh_sidebar()
    window.session.open_conversation(without.id)
    assert not window.mcp.started
    with qtbot.waitSignal(window.mcp.server_started, timeout=WAIT_MS) as started:
        window.session.open_conversation(with_tools.id)
    assert started.args[0] == "files"
    assert "read_file" in [tool.spec.name for tool in window.mcp.tools(["files"])]  # its tools are known


def test_a_result_too_long_for_the_context_loses_its_middle_not_the_answer(qtbot, make_window, servers, qwen_paths):
    from PySide6.QtCore import Qt

    minutes = "".join(f"Line {i} of the minutes: nothing else was decided.\n" for i in range(600))
    (servers / "notes.txt").write_text("The meeting moved to Thursday at 3 pm in room Orchid.\n" + minutes)
    settings = qwen_settings(qwen_paths)
    settings.context_size, settings.max_tokens = 2048, 64  # the file is some 9,000 tokens
    window = make_window(settings)
    passes = []
    window.host.worker.answer_finished.connect(lambda _request, done: passes.append(done))
    tick(window, "files")
    ask(qtbot, window, QUESTION, wait=False)
    qtbot.mouseClick(approval(qtbot, window).once_button, Qt.MouseButton.LeftButton)

    def denied_or_ended() -> bool:  # a further call (the small model may read again) is denied
        dialog = window.approvals.dialog
        if dialog is not None and dialog.isVisible():
            qtbot.mouseClick(dialog.deny_button, Qt.MouseButton.LeftButton)
        return not window.session.busy

    qtbot.waitUntil(denied_or_ended, timeout=WAIT_MS * 2)
    answer = window.session.messages[-1]
    assert answer.tool_uses[0].status == ToolStatus.DONE and answer.tool_uses[0].result.endswith("decided.\n")
    after_result = passes[1]  # the model read the result with its middle left out, and went on
    assert after_result.finish_reason != FinishReason.CONTEXT and after_result.stats.n_results_cut == 1
    assert answer.stats.n_results_cut == 1
    footer = window.chat_view.message_widget(answer.id).footer
    assert "The middle of a tool's result was left out" in footer.state_label.text()
