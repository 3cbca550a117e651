"""MCP configuration: mcp.json read, checked per server and written back; secrets moved to references;
servers imported from other apps' files. No server is run here."""

import json

import pytest

from engine.mcp.config import (
    McpConfig,
    ServerConfig,
    load_config,
    move_secrets_out,
    parse_config,
    parse_server,
    resolve_secrets,
    save_config,
    secret_ref,
)
from engine.mcp.errors import McpConfigError
from engine.mcp.other_apps import candidate_paths, find_importable, import_servers

GOOD = {
    "mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        "search": {"url": "https://search.example.com/mcp", "headers": {"Authorization": "Bearer abc"}},
    }
}


def test_a_valid_file_gives_its_servers_in_order():
    config = parse_config(json.dumps(GOOD))
    assert config.error == "" and config.problems == {}
    assert list(config.servers) == ["files", "search"]
    files, search = config.servers["files"], config.servers["search"]
    assert files.command == "npx" and files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/tmp")
    assert not files.is_http
    assert search.is_http and search.headers == {"Authorization": "Bearer abc"}
    assert search.allow_network is False  # network only once the user says so


def test_a_server_s_time_limit_is_read_and_written_back():
    servers = {"ci": {"command": "make", "timeout": 600}, "quick": {"command": "x"}}
    config = parse_config(json.dumps({"mcpServers": servers}))
    assert config.servers["ci"].timeout_s == 600 and config.servers["quick"].timeout_s is None
    assert config.servers["ci"].to_json()["timeout"] == 600 and "timeout" not in config.servers["quick"].to_json()
    assert "timeout" not in config.servers["ci"].extra  # read as a setting, not carried as an unknown key


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"command": "x", "url": "http://a/mcp"}, "both a command and a url"),
        ({"args": ["a"]}, "neither a command"),
        ({"command": ""}, "command must be a non-empty string"),
        ({"command": 3}, "command must be a non-empty string"),
        ({"command": "x", "args": "one string"}, "args must be a list of strings"),
        ({"command": "x", "args": ["a", 1]}, "args must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "env must be an object whose values are strings"),
        ({"command": "x", "env": ["A=1"]}, "env must be an object whose values are strings"),
        ({"url": "ftp://a/mcp"}, "url must be an http:// or https:// address"),
        ({"url": "http://a/mcp", "headers": {"X": None}}, "headers must be an object"),
        ({"command": "x", "type": "sse"}, "its type 'sse' does not match its command"),
        ({"url": "http://a/mcp", "type": "websocket"}, "its type 'websocket' does not match its url"),
        ({"url": "http://a/mcp", "allowNetwork": "yes"}, "allowNetwork must be true or false"),
        ({"command": "x", "headers": {}}, "headers belong to a url"),
        ({"command": "x", "timeout": "slow"}, "timeout must be a number of seconds"),
        ({"command": "x", "timeout": 0}, "timeout must be a number of seconds"),
        ({"url": "http://a/mcp", "timeout": True}, "timeout must be a number of seconds"),
        ("npx server", "must be an object"),
    ],
)
def test_a_bad_entry_is_named_and_the_others_are_kept(entry, words):
    config = parse_config(json.dumps({"mcpServers": {"bad": entry, "good": {"command": "python3"}}}))
    assert list(config.servers) == ["good"]
    assert list(config.problems) == ["bad"]
    assert config.problems["bad"].startswith("bad: ") and words in config.problems["bad"]


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"mcpServers": {"a": {"command": "x"},}}', "not valid JSON (line 1"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"mcpServers": ["a"]}', '"mcpServers" must be an object'),
    ],
)
def test_a_file_that_cannot_be_read_says_why(text, words):
    config = parse_config(text)
    assert words in config.error
    assert config.servers == {}


@pytest.mark.parametrize(
    "entry, sse",
    [
        ({"url": "http://a/mcp"}, False),
        ({"url": "http://a:8000/sse"}, True),  # where the SDKs serve SSE: as Cursor's entries have it
        ({"url": "http://a/sse/"}, True),
        ({"url": "http://a/v1/sse?key=1"}, True),
        ({"url": "http://a/sse", "type": "http"}, False),  # the type says otherwise: it wins
        ({"url": "http://a/events", "type": "sse"}, True),
        ({"url": "http://a/classes"}, False),
        ({"command": "sse"}, False),
    ],
)
def test_which_http_servers_speak_the_older_sse_transport(entry, sse):
    assert parse_server("s", entry).is_sse is sse


def test_no_file_is_no_servers(tmp_path):
    config = load_config(tmp_path / "mcp.json")
    assert config.servers == {} and config.error == ""


def test_written_and_read_back_with_bad_entries_and_other_keys_kept(tmp_path):
    path = tmp_path / "mcp.json"
    data = {
        "globalShortcut": "Ctrl+Space",  # Claude Desktop keeps other settings in the same file
        "mcpServers": {
            "files": {"command": "npx", "args": ["a"], "env": {"TOKEN": "t"}, "disabled": False},
            "broken": {"command": "x", "url": "http://a/mcp"},
            "web": {"url": "http://localhost:3000/mcp", "allowNetwork": True},
        },
    }
    path.write_text(json.dumps(data))
    config = load_config(path)
    save_config(config, path)
    written = json.loads(path.read_text())
    assert written["globalShortcut"] == "Ctrl+Space"
    assert written["mcpServers"]["broken"] == data["mcpServers"]["broken"]  # kept for the user to fix
    assert written["mcpServers"]["files"] == {"command": "npx", "args": ["a"], "env": {"TOKEN": "t"}, "disabled": False}
    again = load_config(path)
    assert again.servers == config.servers and again.problems == config.problems
    assert again.servers["web"].allow_network is True
    assert list(tmp_path.iterdir()) == [path]  # written whole, no temporary file left


def test_a_file_that_could_not_be_read_is_kept_aside_when_saving(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text("{not json")
    config = load_config(path)
    assert config.error
    config.servers["new"] = ServerConfig("new", command="python3")
    save_config(config, path)
    assert (tmp_path / "mcp.json.bad").read_text() == "{not json"
    assert list(load_config(path).servers) == ["new"]


def test_the_default_file_is_in_speculas_data_folder(isolated_home):
    config = McpConfig(servers={"a": ServerConfig("a", command="python3")})
    save_config(config)
    assert (isolated_home / "mcp.json").is_file()
    assert list(load_config().servers) == ["a"]


def test_secrets_leave_the_file_and_come_back_by_reference(tmp_path):
    server = ServerConfig(
        "search", url="https://s.example/mcp", headers={"Authorization": "Bearer abc", "X-Kept": secret_ref("old")}
    )
    saved, secrets = move_secrets_out(server)
    assert secrets == {"mcp/search/headers/Authorization": "Bearer abc"}
    assert saved.headers["Authorization"] == "${keyring:mcp/search/headers/Authorization}"
    assert saved.headers["X-Kept"] == "${keyring:old}"  # already a reference: left alone
    assert sorted(saved.secret_ids()) == ["mcp/search/headers/Authorization", "old"]
    path = tmp_path / "mcp.json"
    save_config(McpConfig(servers={"search": saved}), path)
    assert "Bearer abc" not in path.read_text()

    resolved = resolve_secrets(load_config(path).servers["search"], {**secrets, "old": "kept"})
    assert resolved.headers == {"Authorization": "Bearer abc", "X-Kept": "kept"}
    with pytest.raises(McpConfigError, match="no value for header X-Kept"):
        resolve_secrets(saved, secrets)


def test_env_secrets_too():
    saved, secrets = move_secrets_out(ServerConfig("gh", command="gh-mcp", env={"GITHUB_TOKEN": "ghp_x"}))
    assert saved.env == {"GITHUB_TOKEN": "${keyring:mcp/gh/env/GITHUB_TOKEN}"}
    assert resolve_secrets(saved, secrets).env == {"GITHUB_TOKEN": "ghp_x"}


CLAUDE = {
    "mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me"]},
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_TOKEN": "t"},
        },
        "remote": {"url": "https://mcp.example.com/mcp", "allowNetwork": True},
        "oops": {"command": 42},
    },
    "preferences": {"menuBarEnabled": False},
}


@pytest.fixture
def other_home(tmp_path, monkeypatch):
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    claude = home / ".config" / "Claude" / "claude_desktop_config.json"
    claude.parent.mkdir(parents=True)
    claude.write_text(json.dumps(CLAUDE))
    cursor = home / ".cursor" / "mcp.json"
    cursor.parent.mkdir(parents=True)
    cursor.write_text('{"mcpServers": {"filesystem": {"command": "other"}}')  # broken JSON
    return home


def test_other_apps_files_are_found_in_home(other_home):
    found = find_importable(platform="linux")  # HOME from the environment, as Path.home() reads it
    assert [(s.app, s.path) for s in found] == [
        ("Claude Desktop", other_home / ".config" / "Claude" / "claude_desktop_config.json"),
        ("Cursor", other_home / ".cursor" / "mcp.json"),
    ]
    claude, cursor = found
    assert list(claude.config.servers) == ["filesystem", "github", "remote"]
    assert "oops" in claude.config.problems
    assert "not valid JSON" in cursor.config.error


def test_paths_per_platform(tmp_path):
    mac = dict(candidate_paths(tmp_path, "darwin", {}))
    assert mac["Claude Desktop"] == tmp_path / "Library/Application Support/Claude/claude_desktop_config.json"
    windows = dict(candidate_paths(tmp_path, "win32", {"APPDATA": str(tmp_path / "Roaming")}))
    assert windows["Claude Desktop"] == tmp_path / "Roaming" / "Claude" / "claude_desktop_config.json"
    assert windows["LM Studio"] == tmp_path / ".lmstudio" / "mcp.json"
    assert windows["Cursor"] == tmp_path / ".cursor" / "mcp.json"


def test_import_chosen_servers_with_clashes_handled(other_home):
    claude = find_importable(platform="linux")[0]
    mine = McpConfig(
        servers={
            "filesystem": ServerConfig("filesystem", command="my-own-fs"),  # same name, another server
            "github": claude.config.servers["github"],  # already here, identical
        }
    )
    result = import_servers(mine, claude, ["filesystem", "github", "remote", "oops", "absent"])
    assert result.added == {"filesystem (Claude Desktop)": "filesystem", "remote": "remote"}
    assert result.skipped == ["github"]
    assert result.missing == ["oops", "absent"]
    assert result.config.servers["filesystem"].command == "my-own-fs"
    assert result.config.servers["filesystem (Claude Desktop)"].args[-1] == "/Users/me"
    assert result.config.servers["remote"].allow_network is False  # network is chosen in Specula
    assert list(mine.servers) == ["filesystem", "github"]  # the config given is left as it was

    again = import_servers(result.config, claude, ["filesystem"])
    assert again.skipped == ["filesystem"] and again.added == {}  # imported once already, under another name

    cursor_like = type(claude)(
        "Cursor", claude.path, McpConfig(servers={"filesystem": ServerConfig("filesystem", command="c")})
    )
    third = import_servers(result.config, cursor_like, ["filesystem"])
    assert list(third.added) == ["filesystem (Cursor)"]
    fourth = import_servers(
        third.config,
        type(claude)("Cursor", claude.path, McpConfig(servers={"filesystem": ServerConfig("filesystem", command="d")})),
        ["filesystem"],
    )
    assert list(fourth.added) == ["filesystem (Cursor 2)"]
