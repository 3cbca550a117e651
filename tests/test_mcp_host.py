"""The MCP host with real servers: the SDK, real subprocesses over stdio, streamable HTTP on loopback.

Timeouts here only bound hangs: they are generous, and no test asserts how long anything took.
"""

import contextlib
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.mcp.config import ServerConfig, parse_server, secret_ref
from engine.mcp.errors import McpCancelled, McpConfigError, McpError, McpServerError, McpTimeoutError, McpToolError
from engine.mcp.host import McpHost
from engine.mcp.results import ServerState

REPO = Path(__file__).resolve().parent.parent
TEST_SERVER = str(REPO / "tests" / "mcp_servers.py")
HANG_S = 600  # a tool that would wait this long is a hang; the tests end it long before
WAIT_S = 120  # the longest any step may take before the test calls it a hang


def test_server(name="test", *args, **kwargs) -> ServerConfig:
    return ServerConfig(name, command=sys.executable, args=(TEST_SERVER, *args), cwd=str(REPO), **kwargs)


test_server.__test__ = False  # a helper, not a test


def workspace_server(root: Path, name="ws") -> ServerConfig:
    return ServerConfig(
        name, command=sys.executable, args=("-m", "engine.mcp.workspace_server", str(root)), cwd=str(REPO)
    )


def children() -> set[int]:
    """This process's child processes, zombies included (Linux: /proc; elsewhere none are counted)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def host_threads() -> list[threading.Thread]:
    """The host's loop thread and its servers' stderr readers: each must end once the host is closed."""
    return [t for t in threading.enumerate() if t.name == "mcp-host" or t.name.startswith("mcp-stderr")]


@pytest.fixture
def host():
    before = children()
    mcp_host = McpHost()
    yield mcp_host
    closer = threading.Thread(target=mcp_host.close)
    closer.start()
    closer.join(WAIT_S)
    assert not closer.is_alive(), "close() hung"
    assert children() - before == set(), "a server process (or a zombie) was left behind"
    for thread in host_threads():  # a stderr reader ends when its server's pipe closes: soon after, not at once
        thread.join(WAIT_S)
    assert host_threads() == []


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "README.md").write_text("A calculator.\nIt adds numbers.\n")
    (tmp_path / "secret.txt").write_text("outside the workspace")
    (root / "link_out").symlink_to(tmp_path / "secret.txt")
    return root


def check_workspace_tools(host: McpHost, name: str, root: Path) -> None:
    assert [t.name for t in host.tools(name)] == ["read_file", "list_files", "search", "edit_file", "run_check"]
    read = next(t for t in host.tools(name) if t.name == "read_file")
    assert read.server == name and read.description and read.input_schema["required"] == ["path"]
    assert read.as_openai()["function"]["name"] == "read_file"
    assert read.as_openai()["function"]["parameters"]["properties"]["path"]["type"] == "string"

    assert host.call(name, "list_files", {}).text.splitlines() == ["README.md", "pkg/calc.py"]
    assert host.call(name, "read_file", {"path": "pkg/calc.py"}).text == "def add(a, b):\n    return a + b\n"
    assert host.call(name, "search", {"pattern": r"add\w*"}).text.splitlines() == [
        "README.md:2: It adds numbers.",
        "pkg/calc.py:1: def add(a, b):",
    ]
    assert host.call(name, "run_check", {"path": "pkg/calc.py"}).text.startswith("ok")
    host.call(name, "edit_file", {"path": "pkg/calc.py", "old_text": "a + b", "new_text": "a +"})
    assert (root / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a +\n"
    assert "SyntaxError" in host.call(name, "run_check", {"path": "pkg/calc.py"}).text
    assert not list(root.rglob("__pycache__"))  # the check leaves nothing behind

    for escape in ("../secret.txt", str(root.parent / "secret.txt"), "link_out", "pkg/../../secret.txt"):
        with pytest.raises(McpToolError) as refused:
            host.call(name, "read_file", {"path": escape})
        assert "outside the workspace" in refused.value.text or "may not contain '..'" in refused.value.text
    with pytest.raises(McpToolError, match="occurs 0 times|does not occur"):
        host.call(name, "edit_file", {"path": "README.md", "old_text": "nowhere", "new_text": "x"})


def test_a_stdio_server_lists_its_tools_and_answers_calls(host, workspace):
    starting = host.start_async(workspace_server(workspace), timeout=WAIT_S)  # as the app starts one
    assert len(starting.result(WAIT_S)) == 5
    status = host.status("ws")
    assert status.state == ServerState.RUNNING and status.server_name.startswith("specula-workspace")
    check_workspace_tools(host, "ws", workspace)
    assert host.tools("ws", refresh=True) == host.tools("ws")  # asked again: the same tools
    host.stop("ws")
    assert host.status("ws").state == ServerState.STOPPED
    with pytest.raises(McpServerError, match="ws is not running"):
        host.call("ws", "list_files", {})


@contextlib.contextmanager
def workspace_over_http(workspace: Path, *flags: str):
    """The workspace server in a child process on a free loopback port: yields the address it printed
    (http://127.0.0.1:PORT/mcp, or /sse with --sse); terminated after."""
    child = subprocess.Popen(
        [sys.executable, "-m", "engine.mcp.workspace_server", str(workspace), "--http", "0", *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/(mcp|sse))", line)
        assert found, f"no address in {line!r}"
        yield found.group(1)
    finally:
        child.terminate()
        child.wait(WAIT_S)


def test_a_streamable_http_server_on_loopback(host, workspace):
    with workspace_over_http(workspace) as url:
        with pytest.raises(McpConfigError, match="not allowed on the network"):
            host.start(ServerConfig("web", url=url))
        host.start(ServerConfig("web", url=url, allow_network=True, headers={"X-Note": "sent"}), timeout=WAIT_S)
        check_workspace_tools(host, "web", workspace)

        with pytest.raises(McpServerError, match="web404 did not start: the server answered HTTP 404 Not Found"):
            host.start(
                ServerConfig("web404", url=url.replace("/mcp", "/nothing-here"), allow_network=True), timeout=WAIT_S
            )
    with pytest.raises(McpServerError, match="web"):  # the server is gone: said, not hung
        host.call("web", "list_files", {}, timeout=WAIT_S)


def test_an_sse_server_on_loopback(host, workspace):
    """The older SSE transport (MCP 2024-11-05), which many servers still speak: chosen by "type": "sse",
    or by a url ending in /sse, as Cursor's and Claude Desktop's entries have it."""
    with workspace_over_http(workspace, "--sse") as url:
        base = url.removesuffix("/sse")
        assert url.endswith("/sse") and parse_server("by-path", {"url": url}).is_sse
        host.start(parse_server("by-path", {"url": url, "allowNetwork": True}), timeout=WAIT_S)
        check_workspace_tools(host, "by-path", workspace)
        typed = parse_server("typed", {"type": "sse", "url": f"{base}/sse/", "allowNetwork": True})
        assert typed.is_sse and len(host.start(typed, timeout=WAIT_S)) == 5
        assert "SyntaxError" in host.call("typed", "run_check", {"path": "pkg/calc.py"}).text  # as the first left it

        # Streamable HTTP where SSE is served: refused by the server, and said so.
        streamable = parse_server("streamable", {"type": "http", "url": url, "allowNetwork": True})
        assert not streamable.is_sse
        with pytest.raises(McpServerError, match="streamable did not start: the server answered HTTP 405") as e:
            host.start(streamable, timeout=WAIT_S)
        assert 'give it "type": "sse"' in e.value.user_message()
        with pytest.raises(McpServerError, match="gone did not start: the server answered HTTP 404 Not Found"):
            host.start(parse_server("gone", {"url": f"{base}/nothing/sse", "allowNetwork": True}), timeout=WAIT_S)
    with pytest.raises(McpServerError, match="by-path"):  # the server is gone: said, not hung
        host.call("by-path", "list_files", {}, timeout=WAIT_S)


def test_nothing_listening_at_the_url(host):
    with socket.socket() as placeholder:  # a port nothing listens on: bound here, never listening
        placeholder.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{placeholder.getsockname()[1]}/mcp"
        with pytest.raises(McpServerError, match="quiet did not start: could not connect"):
            host.start(ServerConfig("quiet", url=url, allow_network=True), timeout=WAIT_S)
    assert host.status("quiet").state == ServerState.FAILED


def test_an_http_server_that_refuses_the_token(host):
    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_DELETE = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        with pytest.raises(McpServerError, match="locked did not start: the server answered HTTP 401") as refused:
            host.start(ServerConfig("locked", url=url, headers={"Authorization": "Bearer wrong"}, allow_network=True))
        assert "token" in refused.value.hint
    finally:
        server.shutdown()
        serving.join()
        server.server_close()


def test_results_text_images_and_errors(host):
    host.start(test_server(env={"MY_SECRET": secret_ref("mcp/test/env/MY_SECRET")}), {"mcp/test/env/MY_SECRET": "s3"})
    assert host.call("test", "echo", {"text": "héllo"}).text == "héllo"
    assert host.call("test", "environment", {"name": "MY_SECRET"}).text == "s3"  # the resolved secret reached it
    assert host.call("test", "picture", {}).text == "a red dot\n[image: image/png, 8 bytes]"
    with pytest.raises(McpToolError, match="fail on test reported an error: .*the disk is on fire") as failed:
        host.call("test", "fail", {})
    assert "the disk is on fire" in failed.value.text  # for the model to read
    with pytest.raises(McpToolError, match="Unknown tool: no_such_tool"):  # how the SDK's servers say it
        host.call("test", "no_such_tool", {})


def test_a_missing_secret_is_said_before_anything_starts(host):
    with pytest.raises(McpConfigError, match="no value for env MY_SECRET"):
        host.start(test_server(env={"MY_SECRET": secret_ref("gone")}))
    assert host_threads() == []  # refused before the host's thread was needed


def test_a_hanging_tool_times_out_and_the_server_stays_usable(host):
    host.start(test_server(), timeout=WAIT_S)
    with pytest.raises(McpTimeoutError, match="slow on test did not answer within 1 s"):
        host.call("test", "slow", {"seconds": HANG_S}, timeout=1)
    assert host.call("test", "echo", {"text": "still here"}).text == "still here"


def test_a_call_is_cancelled_from_another_thread(host):
    host.start(test_server(), timeout=WAIT_S)
    call = host.call_async("test", "slow", {"seconds": HANG_S}, timeout=HANG_S)
    started = threading.Event()
    ended = []

    def waiter():
        started.set()
        try:
            call.result(WAIT_S)
        except Exception as e:  # noqa: BLE001 - the test looks at what it was
            ended.append(e)

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait()
    call.cancel()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], McpCancelled), ended
    assert call.done()
    assert host.call("test", "echo", {"text": "after"}).text == "after"


def test_a_command_that_does_not_exist(host, tmp_path):
    with pytest.raises(McpServerError, match="'/no/such/program' was not found"):
        host.start(ServerConfig("ghost", command="/no/such/program"), timeout=WAIT_S)
    assert host.status("ghost").state == ServerState.FAILED
    with pytest.raises(McpServerError, match="its folder '/no/such/folder' does not exist"):
        host.start(ServerConfig("nowhere", command=sys.executable, cwd="/no/such/folder"), timeout=WAIT_S)
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")  # not made executable
    with pytest.raises(McpServerError, match="Permission denied: .*server.sh"):
        host.start(ServerConfig("denied", command=str(script)), timeout=WAIT_S)


def test_a_server_that_exits_at_once_shows_its_stderr(host):
    with pytest.raises(McpServerError, match="test did not start") as failed:
        host.start(test_server("test", "--exit-at-once"), timeout=WAIT_S)
    assert "fatal: MY_TOKEN is not set" in str(failed.value)
    assert failed.value.stderr_tail[-1] == "fatal: MY_TOKEN is not set"


def test_a_server_that_never_answers_times_out(host):
    silent = ServerConfig("silent", command=sys.executable, args=("-c", f"import time; time.sleep({HANG_S})"))
    with pytest.raises(McpTimeoutError, match="silent did not start"):
        host.start(silent, timeout=2)
    assert host.status("silent").state == ServerState.FAILED


def test_a_server_that_crashes_mid_call(host):
    host.start(test_server(), timeout=WAIT_S)
    with pytest.raises(McpServerError, match="test stopped during the call to crash") as failed:
        host.call("test", "crash", {}, timeout=WAIT_S)
    assert "about to crash: simulated fault" in str(failed.value)
    with pytest.raises(McpServerError, match="test is not running"):
        host.call("test", "echo", {"text": "x"})
    status = host.status("test")
    assert status.state == ServerState.FAILED and "about to crash" in status.message


def test_close_ends_calls_and_servers_and_never_hangs(host, workspace):
    host.start(test_server(), timeout=WAIT_S)
    host.start(workspace_server(workspace), timeout=WAIT_S)
    assert len(children()) >= 2
    call = host.call_async("test", "slow", {"seconds": HANG_S}, timeout=HANG_S)
    host.close()  # the fixture checks: no child process, no zombie, no thread left
    with pytest.raises((McpServerError, McpCancelled)):
        call.result(WAIT_S)
    host.close()  # twice is harmless
    with pytest.raises(McpError, match="The MCP host is closed"):
        host.start(test_server())


def test_a_host_without_servers_opens_nothing(monkeypatch):
    """The offline guarantee: with no server configured, the host makes no socket, thread or process."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("a socket was opened by an MCP host with no servers")

    monkeypatch.setattr(socket.socket, "__init__", refuse)
    monkeypatch.setattr(socket, "socketpair", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    threads = set(threading.enumerate())

    mcp_host = McpHost()
    assert mcp_host.status("anything").state == ServerState.STOPPED
    assert mcp_host.statuses() == {}
    mcp_host.stop("anything")
    with pytest.raises(McpConfigError):  # an HTTP server not allowed on the network: refused here
        mcp_host.start(ServerConfig("web", url="https://example.com/mcp"))
    mcp_host.close()

    assert attempts == []
    assert set(threading.enumerate()) == threads


def test_close_from_a_calls_done_callback(host):
    """A callback runs on the host's thread: closing from there cannot wait on itself, and must not hang."""
    host.start(test_server(), timeout=WAIT_S)
    call = host.call_async("test", "echo", {"text": "bye"})
    call.add_done_callback(lambda _: host.close())
    assert call.result(WAIT_S).text == "bye"
    for thread in host_threads():
        thread.join(WAIT_S)
    assert host_threads() == []  # and the fixture checks that no child is left
