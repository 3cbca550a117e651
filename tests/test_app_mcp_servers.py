"""The MCP servers editor (real widgets, offscreen) in an isolated home: servers added through the form
and saved to mcp.json in the mcpServers notation, their values in a keyring (an in-memory backend set
with keyring.set_keyring, as tests/test_remote_engines_settings.py does); invalid entries kept; an HTTP
server off the network until ticked; import from a Claude Desktop file; Test on the real workspace server
and on a command that does not exist, without blocking; no child process left once the dialog closes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLineEdit

from app.core.api_keys import ApiKeys
from app.core.mcp_servers import save_servers, with_values
from app.core.settings import Settings
from app.dialogs.mcp_import_dialog import McpImportDialog
from app.dialogs.mcp_server_form import HTTP, join_args, split_args
from app.dialogs.mcp_servers_dialog import McpServersDialog
from engine.mcp import McpConfig, ServerConfig, ServerState, load_config, secret_ref
from tests.app_helpers import make_window  # noqa: F401 - the window fixture
from tests.test_mcp_host import children

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 120  # bounds a hang; no test asserts how long a server takes


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self):
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.passwords.get((service, username))

    def set_password(self, service, username, password):
        self.passwords[(service, username)] = password

    def delete_password(self, service, username):
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


@pytest.fixture
def memory_keyring():
    before = keyring.get_keyring()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    try:
        yield memory
    finally:
        keyring.set_keyring(before)


@pytest.fixture
def mcp_file(isolated_home) -> Path:
    return isolated_home / "mcp.json"


def shoot(dialog, tmp_path, name: str) -> None:
    """Renders the dialog (SPECULA_SHOTS=folder keeps a copy to look at)."""
    for folder in (str(tmp_path), os.environ.get("SPECULA_SHOTS")):
        if folder:
            assert dialog.grab().save(os.path.join(folder, name))


def open_dialog(qtbot, **kwargs) -> McpServersDialog:
    dialog = McpServersDialog(ApiKeys(), **kwargs)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def add_stdio(dialog, qtbot, name: str, command: str, args: str = "", cwd: str = "", env=()) -> None:
    dialog.add_button.click()
    form = dialog.form
    qtbot.keyClicks(form.name_edit, name)
    qtbot.keyClicks(form.command_edit, command)
    if args:
        qtbot.keyClicks(form.args_edit, args)
    if cwd:
        qtbot.keyClicks(form.cwd_edit, cwd)
    for key, value in env:
        add_row(qtbot, form.env_rows, key, value)


def add_row(qtbot, rows, key: str, value: str) -> None:
    rows.add_button.click()
    row = rows._rows[-1]
    qtbot.keyClicks(row.key_edit, key)
    qtbot.keyClicks(row.value_edit, value)


def close(dialog, qtbot) -> None:
    """Cancel, then wait for the trial host's closing thread: it must end, leaving no child process."""
    dialog.reject()
    if dialog.closer is not None:
        dialog.closer.join(WAIT_S)
        assert not dialog.closer.is_alive(), "closing the test host hung"


def file_servers(path: Path) -> dict:
    return json.loads(path.read_text())["mcpServers"]


def test_a_stdio_server_added_in_the_form_is_saved_with_its_values_in_the_keyring(
    qtbot, mcp_file, memory_keyring, tmp_path
):
    dialog = open_dialog(qtbot)
    assert dialog.pages.currentWidget() is dialog.empty_hint
    shoot(dialog, tmp_path, "mcp_empty.png")
    folder = tmp_path / "my project"
    add_stdio(
        dialog, qtbot, "files", "python3", f'-m engine.mcp.workspace_server "{folder}"', env=[("TOKEN", "s3cret")]
    )
    add_row(qtbot, dialog.form.env_rows, "DEBUG", "1")
    assert dialog.form.env_rows._rows[0].value_edit.echoMode() == QLineEdit.EchoMode.Password
    assert dialog.ok_button.isEnabled() and not dialog.problem_note.isVisible()
    shoot(dialog, tmp_path, "mcp_stdio.png")
    with qtbot.waitSignal(dialog.servers_changed):
        dialog.ok_button.click()
    assert file_servers(mcp_file) == {
        "files": {
            "command": "python3",
            "args": ["-m", "engine.mcp.workspace_server", str(folder)],
            "env": {"TOKEN": secret_ref("mcp/files/env/TOKEN"), "DEBUG": secret_ref("mcp/files/env/DEBUG")},
        }
    }
    assert memory_keyring.passwords == {
        ("Specula", "mcp/files/env/TOKEN"): "s3cret",
        ("Specula", "mcp/files/env/DEBUG"): "1",
    }
    assert "s3cret" not in mcp_file.read_text()

    again = open_dialog(qtbot)  # the next time: the arguments as typed, the values from the keyring
    assert again.form.name_edit.text() == "files" and again.server_list.topLevelItem(0).text(1) == "program"
    assert again.form.args_edit.text() == f"-m engine.mcp.workspace_server '{folder}'"
    assert again.form.env_rows.rows() == [("TOKEN", "s3cret"), ("DEBUG", "1")]
    again.form.name_edit.clear()
    qtbot.keyClicks(again.form.name_edit, "workspace")  # renamed: its values move to new keyring IDs
    again.accept()
    assert list(file_servers(mcp_file)) == ["workspace"]
    assert set(memory_keyring.passwords) == {
        ("Specula", "mcp/workspace/env/TOKEN"),
        ("Specula", "mcp/workspace/env/DEBUG"),
    }


def test_a_server_s_time_limit_is_set_in_the_form_and_kept_in_mcp_json(qtbot, mcp_file, memory_keyring, tmp_path):
    dialog = open_dialog(qtbot)
    add_stdio(dialog, qtbot, "ci", "make", "check")
    assert dialog.form.timeout_box.text() == "60 s (the default)"  # nothing set: nothing written
    dialog.form.timeout_box.clear()
    qtbot.keyClicks(dialog.form.timeout_box, "900")
    shoot(dialog, tmp_path, "mcp_timeout.png")
    dialog.accept()
    assert file_servers(mcp_file)["ci"] == {"command": "make", "args": ["check"], "timeout": 900}

    again = open_dialog(qtbot)
    assert again.form.timeout_box.value() == 900
    again.form.timeout_box.setValue(0)  # back to the default: the key leaves the file
    again.accept()
    assert "timeout" not in file_servers(mcp_file)["ci"]


def test_mistakes_are_said_inline_and_keep_ok_disabled(qtbot, mcp_file, memory_keyring):
    dialog = open_dialog(qtbot)
    dialog.add_button.click()
    assert not dialog.ok_button.isEnabled()
    qtbot.keyClicks(dialog.form.name_edit, "x")
    assert dialog.problem_note.toPlainText() == "Command must be a non-empty string."
    qtbot.keyClicks(dialog.form.command_edit, "npx")
    assert dialog.ok_button.isEnabled()
    qtbot.keyClicks(dialog.form.args_edit, '"unclosed')
    assert "cannot be split: no closing quotation" in dialog.problem_note.toPlainText()
    assert not dialog.ok_button.isEnabled() and not dialog.test_button.isEnabled()
    dialog.form.args_edit.clear()
    dialog.form.args_edit.textEdited.emit("")
    add_stdio(dialog, qtbot, "x", "uvx")
    assert dialog.problem_note.toPlainText() == "Another server is named x."
    assert dialog.server_list.topLevelItem(1).text(0) == "⚠ x"
    dialog.ok_button.click()
    assert dialog.isVisible() and not mcp_file.exists()


def test_an_invalid_entry_is_shown_with_its_problem_and_kept(qtbot, mcp_file, memory_keyring, tmp_path):
    broken = {"command": "npx", "url": "https://example.com/mcp", "note": "hand-written"}
    mcp_file.parent.mkdir(parents=True, exist_ok=True)
    mcp_file.write_text(
        json.dumps({"mcpServers": {"good": {"command": "uvx", "args": ["tool"]}, "broken": broken}, "theme": "x"})
    )
    dialog = open_dialog(qtbot)
    assert [dialog.server_list.topLevelItem(i).text(1) for i in range(2)] == ["program", "invalid"]
    dialog.server_list.setCurrentItem(dialog.server_list.topLevelItem(1))
    assert dialog.pages.currentIndex() == 2
    assert "has both a command and a url" in dialog.invalid_note.text()
    assert '"note": "hand-written"' in dialog.invalid_text.text()
    shoot(dialog, tmp_path, "mcp_invalid.png")
    dialog.add_button.click()
    qtbot.keyClicks(dialog.form.name_edit, "broken")
    assert dialog.problem_note.toPlainText().startswith("Another server is named broken")
    dialog.remove_button.click()
    assert dialog.ok_button.isEnabled()
    dialog.accept()
    data = json.loads(mcp_file.read_text())
    assert data["mcpServers"] == {"good": {"command": "uvx", "args": ["tool"]}, "broken": broken}
    assert data["theme"] == "x"


def test_an_http_server_stays_off_the_network_until_ticked(qtbot, mcp_file, memory_keyring, tmp_path):
    dialog = open_dialog(qtbot)
    dialog.add_button.click()
    form = dialog.form
    form.kind_box.setCurrentIndex(HTTP)
    assert form.url_edit.isVisible() and not form.command_edit.isVisible()
    assert form.network_box.isVisible() and not form.network_box.isChecked()
    assert "never uses the network" in form.network_note.toPlainText()
    qtbot.keyClicks(form.name_edit, "search")
    assert dialog.problem_note.toPlainText() == "Url must be an http:// or https:// address."
    qtbot.keyClicks(form.url_edit, "https://mcp.example.com/mcp")
    add_row(qtbot, form.header_rows, "Authorization", "Bearer abc")
    assert dialog.server_list.topLevelItem(0).text(1) == "URL"
    assert dialog.server_list.topLevelItem(0).text(2) == "off"
    dialog.test_button.click()  # refused before anything is started or asked
    assert dialog.test_status.text() == "A test connects to the server: allow it to use the network first."
    assert dialog.trial._host is None
    shoot(dialog, tmp_path, "mcp_http.png")
    dialog.accept()
    assert file_servers(mcp_file) == {
        "search": {
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": secret_ref("mcp/search/headers/Authorization")},
            "allowNetwork": False,
        }
    }
    assert memory_keyring.passwords == {("Specula", "mcp/search/headers/Authorization"): "Bearer abc"}
    close(dialog, qtbot)

    again = open_dialog(qtbot)
    again.form.network_box.click()
    assert again.server_list.topLevelItem(0).text(2) == "allowed"
    again.accept()
    assert file_servers(mcp_file)["search"]["allowNetwork"] is True


def test_import_from_a_claude_desktop_file(qtbot, mcp_file, memory_keyring, tmp_path, monkeypatch):
    home = tmp_path / "user"
    claude = home / ".config" / "Claude" / "claude_desktop_config.json"
    claude.parent.mkdir(parents=True)
    claude.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "server-filesystem", "/docs"]},
                    "github": {"command": "docker", "args": ["run", "gh"], "env": {"GITHUB_TOKEN": "ghp_123"}},
                    "remote": {"url": "https://mcp.example.com/mcp", "allowNetwork": True},
                    "old": {"type": "sse", "url": "https://old.example.com/sse"},
                    "typo": {"type": "websocket", "url": "wss://old.example.com/ws"},
                },
                "globalShortcut": "Ctrl+Space",
            }
        )
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    mcp_file.parent.mkdir(parents=True, exist_ok=True)
    mcp_file.write_text(json.dumps({"mcpServers": {"files": {"command": "uvx", "args": ["mine"]}}}))
    dialog = open_dialog(qtbot)
    seen = []

    def tick_and_import() -> None:
        chooser = QApplication.activeModalWidget()
        assert isinstance(chooser, McpImportDialog)
        top = chooser.tree.topLevelItem(0)
        seen.extend(top.child(i).text(0) + " | " + top.child(i).text(1) for i in range(top.childCount()))
        shoot(chooser, tmp_path, "mcp_import.png")
        chooser.accept()

    QTimer.singleShot(0, tick_and_import)
    dialog.import_button.click()
    assert seen[0].startswith("files | program · npx -y server-filesystem /docs")
    assert seen[2].startswith("remote | HTTP · https://mcp.example.com/mcp (network stays off")
    assert seen[3].startswith("old | HTTP (SSE) · https://old.example.com/sse (network stays off")
    assert seen[4].startswith("typo | cannot be imported: its type 'websocket' does not match its url")
    note = dialog.import_note.toPlainText()
    assert note == (
        "Added from Claude Desktop: files (Claude Desktop), github, remote, old (files: the name was taken here)."
    )
    assert dialog.form.name_edit.text() == "files (Claude Desktop)"  # the first one added is shown
    shoot(dialog, tmp_path, "mcp_imported.png")
    dialog.accept()
    servers = file_servers(mcp_file)
    assert list(servers) == ["files", "files (Claude Desktop)", "github", "remote", "old"]
    assert servers["old"] == {"type": "sse", "url": "https://old.example.com/sse", "allowNetwork": False}
    assert servers["github"]["env"] == {"GITHUB_TOKEN": secret_ref("mcp/github/env/GITHUB_TOKEN")}
    assert servers["remote"]["allowNetwork"] is False
    assert memory_keyring.passwords == {("Specula", "mcp/github/env/GITHUB_TOKEN"): "ghp_123"}

    again = open_dialog(qtbot)  # importing the same again adds nothing: each is already here
    QTimer.singleShot(0, lambda: QApplication.activeModalWidget().accept())
    again.import_button.click()
    assert again.import_note.toPlainText() == "Nothing was chosen."


def test_import_says_when_no_other_app_is_found(qtbot, mcp_file, memory_keyring):
    dialog = open_dialog(qtbot, find_sources=lambda: [])
    dialog.import_button.click()
    assert "No Claude Desktop, LM Studio or Cursor configuration was found" in dialog.import_note.toPlainText()


def test_test_lists_the_workspace_servers_tools_without_blocking(qtbot, mcp_file, memory_keyring, tmp_path):
    before = children()
    dialog = open_dialog(qtbot)
    add_stdio(dialog, qtbot, "ws", sys.executable, f"-m engine.mcp.workspace_server {tmp_path}", cwd=str(REPO))
    dialog.test_button.click()
    assert dialog.test_status.text() == "Starting ws…" and not dialog.test_button.isEnabled()  # returned at once
    qtbot.waitUntil(lambda: dialog.test_button.isEnabled(), timeout=WAIT_S * 1000)
    assert dialog.test_status.text() == "ws started and offers 5 tools:"
    tools = dialog.test_result.toPlainText().splitlines()
    assert [line.split(" — ")[0] for line in tools] == ["read_file", "list_files", "search", "edit_file", "run_check"]
    assert all(" — " in line for line in tools)  # each with its description
    shoot(dialog, tmp_path, "mcp_test_tools.png")
    close(dialog, qtbot)
    qtbot.waitUntil(lambda: children() - before == set(), timeout=WAIT_S * 1000)


def test_test_on_a_command_that_does_not_exist_says_so(qtbot, mcp_file, memory_keyring, tmp_path):
    dialog = open_dialog(qtbot)
    add_stdio(dialog, qtbot, "ghost", "/no/such/program")
    dialog.test_button.click()
    assert dialog.test_status.text() == "Starting ghost…"
    qtbot.waitUntil(lambda: dialog.test_button.isEnabled(), timeout=WAIT_S * 1000)
    assert dialog.test_status.text() == "Failed:"
    assert "'/no/such/program' was not found" in dialog.test_result.toPlainText()
    shoot(dialog, tmp_path, "mcp_test_error.png")
    close(dialog, qtbot)


def test_closing_during_a_test_leaves_no_child_process(qtbot, mcp_file, memory_keyring):
    before = children()
    dialog = open_dialog(qtbot)
    add_stdio(dialog, qtbot, "silent", sys.executable, "-c 'import time; time.sleep(600)'")
    dialog.test_button.click()
    host = lambda: dialog.trial._host  # noqa: E731
    qtbot.waitUntil(  # the server is starting: its process runs, and it will never answer
        lambda: host() is not None and host().status("silent").state == ServerState.STARTING and children() != before,
        timeout=WAIT_S * 1000,
    )
    started = time.monotonic()
    dialog.reject()
    assert time.monotonic() - started < 5  # the GUI thread does not wait for the server to stop
    dialog.closer.join(WAIT_S)
    assert not dialog.closer.is_alive()
    qtbot.waitUntil(lambda: children() - before == set(), timeout=WAIT_S * 1000)
    assert host().status("silent").state == ServerState.STOPPED


def test_without_a_keyring_the_dialog_says_values_last_the_session(qtbot, mcp_file, no_keyring, tmp_path):
    dialog = open_dialog(qtbot)
    dialog.add_button.click()
    assert dialog.form.keyring_note.toPlainText().startswith("No system keyring was found")
    assert "their values are kept until Specula closes" in dialog.form.keyring_note.toPlainText()
    shoot(dialog, tmp_path, "mcp_no_keyring.png")


# -- keyring and file, without widgets ----------------------------------------------------------------


def test_save_servers_keeps_empty_values_written_and_forgets_values_no_longer_used(memory_keyring, tmp_path):
    path = tmp_path / "mcp.json"
    keys = ApiKeys()
    server = ServerConfig("a", command="x", env={"TOKEN": "t", "EMPTY": ""})
    saved = save_servers([server], McpConfig(), keys, path=path)
    assert saved.servers["a"].env == {"TOKEN": secret_ref("mcp/a/env/TOKEN"), "EMPTY": ""}
    assert load_config(path).servers["a"] == saved.servers["a"]
    resolved, missing = with_values(saved.servers["a"], keys)
    assert resolved.env == {"TOKEN": "t", "EMPTY": ""} and missing == set()
    save_servers([], saved, keys, path=path)
    assert memory_keyring.passwords == {}
    assert with_values(saved.servers["a"], keys)[1] == {"TOKEN"}


def test_a_value_the_keyring_lost_is_asked_for_again_and_its_reference_kept(qtbot, mcp_file, memory_keyring):
    ref = secret_ref("mcp/gh/env/TOKEN")
    mcp_file.parent.mkdir(parents=True, exist_ok=True)
    mcp_file.write_text(
        json.dumps({"mcpServers": {"gh": {"command": "gh-mcp", "env": {"TOKEN": ref}}, "b": {"command": "b"}}})
    )
    dialog = open_dialog(qtbot)
    [row] = dialog.form.env_rows._rows
    assert row.value_edit.text() == "" and row.value_edit.placeholderText() == "not in the keyring: type it again"
    assert dialog.form.env_rows.rows() == [("TOKEN", ref)]  # untouched: the reference stays
    dialog.accept()
    assert file_servers(mcp_file)["gh"]["env"] == {"TOKEN": ref} and memory_keyring.passwords == {}

    again = open_dialog(qtbot)
    qtbot.keyClicks(again.form.env_rows._rows[0].value_edit, "typed")
    again.server_list.setCurrentItem(again.server_list.topLevelItem(1))
    again.server_list.setCurrentItem(again.server_list.topLevelItem(0))
    assert again.form.env_rows._rows[0].value_edit.text() == "typed"
    again.accept()
    assert memory_keyring.passwords == {("Specula", "mcp/gh/env/TOKEN"): "typed"}


def test_a_file_that_cannot_be_read_is_said_and_kept_beside_the_new_one(qtbot, mcp_file, memory_keyring):
    mcp_file.parent.mkdir(parents=True, exist_ok=True)
    mcp_file.write_text('{"mcpServers": {"a": ')
    dialog = open_dialog(qtbot)
    assert "could not be used: not valid JSON" in dialog.file_note.toPlainText() and dialog.file_note.isVisible()
    add_stdio(dialog, qtbot, "a", "uvx")
    dialog.accept()
    assert file_servers(mcp_file) == {"a": {"command": "uvx", "args": []}}
    assert mcp_file.with_name("mcp.json.bad").read_text() == '{"mcpServers": {"a": '


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_arguments_split_as_a_shell_would_and_come_back_the_same(platform):
    assert split_args('-y "my folder" a#b', platform) == ["-y", "my folder", "a#b"]
    for args in (["a b", "it's", "#1", ""], ["-m", "engine.mcp.workspace_server", "C:\\My Projects\\x"]):
        assert split_args(join_args(args), platform) == args
    assert split_args(r"C:\Users\me", "win32") == [r"C:\Users\me"]  # a path, not escapes
    assert split_args(r"my\ folder", "linux") == ["my folder"]
    with pytest.raises(ValueError, match="No closing quotation"):
        split_args('"open', platform)


def test_settings_menu_opens_the_editor_and_the_window_says_when_servers_changed(
    qtbot,
    make_window,  # noqa: F811
    memory_keyring,
):
    window = make_window(Settings(), wait=False)
    [action] = [a for a in window.menuBar().actions() if a.text() == "&Settings"]
    [open_action] = [a for a in action.menu().actions() if a.text() == "&MCP servers…"]

    def add_one() -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, McpServersDialog) and dialog.api_keys is window.api_keys
        add_stdio(dialog, qtbot, "files", "uvx", "mcp-server-files", env=[("KEY", "k")])
        dialog.ok_button.click()

    QTimer.singleShot(0, add_one)
    with qtbot.waitSignal(window.mcp_servers_changed):
        open_action.trigger()
    assert load_config().servers["files"].args == ("mcp-server-files",)
    assert window.api_keys.get("mcp/files/env/KEY") == "k"
