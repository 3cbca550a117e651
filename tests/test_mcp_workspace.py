"""The workspace MCP server's tools, in process through the SDK's own client (the host's tests run it as a
subprocess): what each tool does at the edges, and that no path leads out of the folder."""

import subprocess
import sys

import anyio
import pytest
from mcp import Client

from engine.mcp.workspace_server import build_server


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("x = 1\nx = 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "data.bin").write_bytes(b"\x00\xff\xfe x = 1")
    (root / "alias.py").symlink_to(root / "src" / "main.py")  # a link inside the folder: allowed
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "key.txt").write_text("secret")
    (root / "escape").symlink_to(tmp_path / "outside")  # a link to a folder outside: refused
    return root


def call(root, tool, **arguments):
    """(text, is_error) of one call."""

    async def run():
        async with Client(build_server(root)) as client:
            result = await client.call_tool(tool, arguments)
            return "\n".join(block.text for block in result.content), result.is_error

    return anyio.run(run)


def test_listing_skips_tool_folders_and_links_out(root):
    text, error = call(root, "list_files")
    assert not error
    assert text.splitlines() == ["alias.py", "data.bin", "src/main.py"]


def test_links_inside_are_followed_and_links_out_refused(root):
    assert call(root, "read_file", path="alias.py") == ("x = 1\nx = 1\n", False)
    for path in ("escape/key.txt", "escape", "/etc/hostname", "src/../../outside/key.txt"):
        text, error = call(root, "read_file", path=path)
        assert error and "secret" not in text, path
    text, error = call(root, "list_files", path="escape")
    assert error and "outside the workspace" in text


def test_search(root):
    text, error = call(root, "search", pattern=r"x = \d")
    assert not error
    assert text.splitlines() == [
        "alias.py:1: x = 1",
        "alias.py:2: x = 1",
        "src/main.py:1: x = 1",
        "src/main.py:2: x = 1",
    ]
    assert call(root, "search", pattern="nothing like this") == ("(no matches)", False)
    text, error = call(root, "search", pattern="(unclosed")
    assert error and "not a regular expression" in text


def test_edit_replaces_one_occurrence_or_creates(root):
    text, error = call(root, "edit_file", path="src/main.py", old_text="x = 1", new_text="y")
    assert error and "occurs 2 times" in text
    assert call(root, "edit_file", path="src/main.py", old_text="x = 1\nx", new_text="x = 1\ny")[1] is False
    assert (root / "src" / "main.py").read_text() == "x = 1\ny = 1\n"
    assert call(root, "edit_file", path="new/mod.py", old_text="", new_text="z = 3\n")[1] is False
    assert (root / "new" / "mod.py").read_text() == "z = 3\n"
    text, error = call(root, "edit_file", path="new/mod.py", old_text="", new_text="again")
    assert error and "exists" in text
    text, error = call(root, "edit_file", path="../outside/new.txt", old_text="", new_text="x")
    assert error and not (root.parent / "outside" / "new.txt").exists()


def test_run_check_runs_only_the_compile_check(root):
    assert call(root, "run_check", path="src/main.py") == ("ok: src/main.py compiles", False)
    (root / "src" / "bad.py").write_text("def f(:\n")
    text, error = call(root, "run_check", path="src/bad.py")
    assert not error and text.startswith("failed:") and "SyntaxError" in text
    assert str(root) not in text  # paths as the model knows them, relative
    text, error = call(root, "run_check", path="data.bin")
    assert error and "not a Python file" in text


def test_the_command_line_refuses_a_folder_that_is_not_there(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "engine.mcp.workspace_server", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "absent" in done.stderr and "No such file or directory" in done.stderr


def test_a_path_that_is_not_there_is_answered_with_the_nearest_ones(root):
    # What a small model does: it puts the file in a folder of its own invention, or misspells it.
    text, error = call(root, "read_file", path="project files/main.py")
    assert error and text.endswith("'project files/main.py' does not exist; did you mean 'src/main.py'?")
    text, error = call(root, "read_file", path="src/mian.py")
    assert error and text.endswith("does not exist; did you mean 'src/main.py'?")
    text, error = call(root, "search", pattern="x", path="sorc")
    assert error and text.endswith("'sorc' does not exist; did you mean 'src'?")
    text, error = call(root, "read_file", path="zzzz.toml")
    assert error and text.endswith("'zzzz.toml' does not exist")  # nothing near: no guess
    text, error = call(root, "read_file", path="key.txt")  # there only behind a link that leads out: not named
    assert error and text.endswith("'key.txt' does not exist")
