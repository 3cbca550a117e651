"""Tools in the terminal chat (`python -m engine chat --tools SERVER`): the user's MCP servers from mcp.json,
each call asked at the prompt, the answer going on from the result. Real subprocesses of the terminal chat,
the starter pair (Qwen2.5-Coder 1.5B drafted by 0.5B, greedy, under the tool grammar), and the workspace
MCP server over stdio on a temporary folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files
SYSTEM = (
    "You are a helpful assistant with tools for the user's files. When a question is about a file, "
    "call a tool first, then answer the user in plain words from the tool's result."
)
QUESTION = "When is the meeting? It is written in notes.txt."


@pytest.fixture
def workspace(isolated_home, tmp_path):
    """mcp.json with the workspace server ("files") on a folder holding notes.txt."""
    from engine.mcp import McpConfig, ServerConfig, save_config

    folder = tmp_path / "workspace"
    folder.mkdir()
    (folder / "notes.txt").write_text("The meeting moved to Thursday at 3 pm in room Orchid.\n")
    files = ServerConfig(
        "files", command=sys.executable, args=("-m", "engine.mcp.workspace_server", str(folder)), cwd=str(REPO)
    )
    save_config(McpConfig(servers={"files": files}))
    return folder


def chat(qwen_paths, *args: str, stdin: str) -> subprocess.CompletedProcess:
    target, draft = qwen_paths
    command = [sys.executable, "-m", "engine", "chat", "--model", target, "--draft", draft, "--temperature", "0"]
    command += ["--max-tokens", "160", "--system", SYSTEM, *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, timeout=900)


def chat_without_model(server: str) -> subprocess.CompletedProcess:
    """The terminal chat on a model that does not exist: what --tools says must come before it is missed."""
    command = [sys.executable, "-m", "engine", "chat", "--model", "/nonexistent.gguf", "--tools", server]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(command, input="/quit\n", capture_output=True, text=True, env=env, timeout=120)


def test_a_call_is_asked_run_and_answered_from(workspace, qwen_paths):
    # "a": always allow the tool in this chat, so further calls the model makes are not asked again; /new starts
    # another chat, which asks again. The second chat is the first one again (greedy, the same question).
    done = chat(qwen_paths, "--tools", "files", stdin=f"{QUESTION}\na\n/new\n{QUESTION}\na\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "tools from files: read_file" in done.stderr
    out = done.stdout
    asked = '→ read_file({"path": "notes.txt"})\nRun it on files? [y]es, [a]lways for read_file, [n]o: '
    assert asked in out  # the call, shown as a call, then the question
    assert "<tool_call>" not in out  # the call's markup is not printed as text
    assert "  The meeting moved to Thursday at 3 pm in room Orchid.\n" in out  # the result, shown indented
    assert out.count("Run it on files?") == 2  # once a chat: "always" holds until /new
    # In each chat every pass but the last called tools; the last one answered. (What the 1.5B model says from
    # the result is not asserted: it is the tool round trip that is under test.)
    passes = [line.split("]")[0] + "]" for line in done.stderr.splitlines() if line.startswith("[")]
    answers = [n for n, p in enumerate(passes) if p != "[tool_calls]"]
    assert len(answers) == 2 and answers[-1] == len(passes) - 1, passes
    assert {passes[n] for n in answers} <= {"[stop]", "[length]"}
    assert passes[0] == passes[answers[0] + 1] == "[tool_calls]" and len(passes) <= 18


def test_no_ends_the_answer_and_the_chat_goes_on(workspace, qwen_paths):
    done = chat(qwen_paths, "--tools", "files", stdin=f"{QUESTION}\nn\nThank you. Say OK.\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "[tool] You denied read_file on files: the answer stops here." in done.stdout
    assert "room Orchid" not in done.stdout  # the file was not read
    # The next message is answered: the denied call stayed in the conversation with a result saying so.
    assert done.stderr.count("[stop]") == 1 and done.stderr.count("[tool_calls]") == 1


def test_quit_at_the_question_leaves_the_chat(workspace, qwen_paths):
    # Before, /quit was no answer: the question came again, and at the end of input the call counted as denied.
    done = chat(qwen_paths, "--tools", "files", stdin=f"{QUESTION}\n/quit\nThis line is never read.\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Run it on files?") == 1
    assert "denied" not in done.stdout and "room Orchid" not in done.stdout  # nothing ran, nothing answered
    assert done.stderr.count("[tool_calls]") == 1 and "[stop]" not in done.stderr


def test_an_unknown_server_is_named_before_any_model_loads(workspace):
    done = chat_without_model("web")
    assert done.returncode == 2
    assert "No usable MCP server named web" in done.stderr and "Your servers: files." in done.stderr
    assert "loading" not in done.stderr


def test_a_server_that_will_not_start_says_why(isolated_home, tmp_path):
    from engine.mcp import McpConfig, ServerConfig, save_config

    broken = ServerConfig("broken", command=sys.executable, args=("-c", "import sys; sys.exit('no such root')"))
    save_config(McpConfig(servers={"broken": broken}))
    done = chat_without_model("broken")
    assert done.returncode == 2
    assert "The MCP server broken did not start." in done.stderr and "no such root" in done.stderr


def test_the_question_ctrl_c_stops_the_answer_and_always_is_asked_once(workspace):
    """TerminalTools on the real workspace server, the user's answers scripted at the ask seam."""
    from engine.cli_tools import TerminalTools
    from engine.tools import ToolCall

    replies = iter([KeyboardInterrupt, "maybe", "a"])  # Ctrl+C; a reply that is no answer (asked again); always
    questions = []

    def ask(question: str) -> str:
        questions.append(question)
        reply = next(replies)
        if reply is KeyboardInterrupt:
            raise KeyboardInterrupt
        return reply

    tools = TerminalTools(["files"], ask=ask)
    tools.start(lambda line: None)
    try:
        read = ToolCall("c0", "read_file", {"path": "notes.txt"})
        stopped = tools.run(read)
        assert stopped.stop == "Stopped before read_file ran: the answer stops here." and stopped.text == ""
        allowed = tools.run(read)
        assert "room Orchid" in allowed.text and not allowed.stop
        assert len(questions) == 3  # "maybe" was asked again
        again = tools.run(read)  # "always": not asked
        assert "room Orchid" in again.text and len(questions) == 3
        missing = tools.run(ToolCall("c1", "read_file", {"path": "absent.txt"}))
        assert not missing.stop and "absent.txt" in missing.text  # the tool's own error, for the model to read
    finally:
        tools.close()


def test_passages_of_a_collection_leave_room_for_the_tools(workspace, smollm2_path, tmp_path):
    """--collection beside --tools: the passages packed into the question fit beside the tools' descriptions,
    so a first question is answered rather than refused as too long for the context."""
    from engine import cli

    documents = tmp_path / "licenses"
    documents.mkdir()
    shutil.copy(LICENSES / "GPL-3", documents / "GPL-3")  # its six best passages and the tools: more than 1,536
    assert cli.main(["docs", "add", "licenses", str(documents)]) == 0
    assert cli.main(["docs", "index", "licenses"]) == 0
    command = [sys.executable, "-m", "engine", "chat", "--model", smollm2_path, "--draft", "none", "--ctx", "1536"]
    command += ["--temperature", "0", "--max-tokens", "16", "--collection", "licenses", "--tools", "files"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    stdin = "What does the licence say about conveying verbatim copies?\nn\n/quit\n"
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    passes = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert passes and passes[0].startswith(("[stop]", "[length]", "[tool_calls]")), done.stdout + done.stderr
    assert "Sources" in done.stdout.split("\n> ")[1]  # the first answer came from passages


def test_a_result_s_escape_sequences_are_shown_not_obeyed(workspace):
    """A file (or a server) may hold terminal escapes: the model reads them as they are, the terminal shows them
    as text, so a result cannot retitle, clear or hide the user's terminal."""
    from engine.cli_tools import TerminalTools, result_lines
    from engine.tools import ToolCall

    (workspace / "trap.txt").write_text("before\x1b]0;owned\x07\x1b[2J\x1b[8mhidden\tafter\n")
    tools = TerminalTools(["files"], ask=lambda question: "y")
    tools.start(lambda line: None)
    try:
        outcome = tools.run(ToolCall("c0", "read_file", {"path": "trap.txt"}))
    finally:
        tools.close()
    assert "\x1b[2J" in outcome.text  # the model reads the file as it is
    printed = result_lines(outcome.text)
    assert "\x1b" not in printed and "\x07" not in printed
    assert "before\\x1b]0;owned\\x07\\x1b[2J\\x1b[8mhidden\tafter" in printed


class QuotingEngine:
    """At the engine seam: an answer that quotes a result's escape sequences (as lookup drafts a quote)."""

    def chat(self, messages, *args, **kwargs):
        from engine.config import TokenSource
        from engine.decoding.events import DoneEvent, FinishReason, TokenEvent
        from engine.decoding.stats import AnswerStats

        text = "It says \x1b]0;owned\x07\x1b[2J."
        yield TokenEvent(1, text, TokenSource.LOOKUP)
        yield DoneEvent(FinishReason.STOP, AnswerStats(), text)


def test_an_answer_quoting_escape_sequences_shows_them_as_text(capsys):
    from engine import cli

    args = cli.build_parser().parse_args(["chat"])
    done = cli.stream_pass(QuotingEngine(), args, [], [], None, ())
    assert done.text == "It says \x1b]0;owned\x07\x1b[2J."  # the conversation keeps what the model wrote
    assert capsys.readouterr().out == "It says \\x1b]0;owned\\x07\\x1b[2J."


def test_each_of_a_pass_s_calls_is_shown_with_its_question(workspace, capsys):
    """Two calls in one pass (shown together as they streamed): each question comes under its own call, and a
    "no" leaves the calls after it not run, with results that say so."""
    from engine import cli
    from engine.cli_tools import TerminalTools
    from engine.config import ChatMessage
    from engine.tools import ToolCall

    replies = iter(["y", "n"])
    tools = TerminalTools(["files"], ask=lambda question: print(question, end="") or next(replies))
    tools.start(lambda line: None)
    calls = (
        ToolCall("c0", "read_file", {"path": "notes.txt"}),
        ToolCall("c1", "list_files", {}),
        ToolCall("c2", "read_file", {"path": "other.txt"}),
    )
    asked: list[ChatMessage] = []
    try:
        assert cli.run_calls(tools, calls, asked) is False
    finally:
        tools.close()
    out = capsys.readouterr().out
    first = out.index('→ read_file({"path": "notes.txt"})\nRun it on files? [y]es, [a]lways for read_file')
    second = out.index("→ list_files({})\nRun it on files? [y]es, [a]lways for list_files")
    assert first < out.index("room Orchid") < second
    assert "other.txt" not in out  # not asked: the answer stopped at the "no"
    assert [m.tool_call_id for m in asked] == ["c0", "c1", "c2"] and "room Orchid" in asked[0].content
    assert asked[1].content == asked[2].content == "(not run: You denied list_files on files: the answer stops here.)"
