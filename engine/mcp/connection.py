"""One MCP server's connection, on the host's event loop: started, listed, called, stopped.

Everything here runs on the loop's thread (engine.mcp.host is the thread-safe face). The whole life of
a connection is one task (run), because the SDK's transports are anyio task groups that must be entered
and left by the same task; stop() asks that task to leave, and never waits unbounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, Implementation

from engine.mcp.config import ServerConfig
from engine.mcp.errors import McpCancelled, McpError, McpServerError, McpTimeoutError, McpToolError
from engine.mcp.results import ServerState, ServerStatus, ToolInfo, ToolResult, result_text

log = logging.getLogger(__name__)

STDERR_LINES = 12  # kept for messages: enough for a Python traceback's end or a Node error
_STDERR_LINE_CHARS = 400
_STDERR_DRAIN_S = 1.0  # after a server stops, time for the reader to take what it wrote last
CLIENT_INFO = Implementation(name="Specula", version="0.1.0")


def _leaf(error: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(getattr(error, "exceptions", None), tuple) and error.exceptions:  # BaseExceptionGroup (3.11+)
        error = error.exceptions[0]
    return error


def _describe(error: BaseException) -> str:
    error = _leaf(error)
    if isinstance(error, MCPError):
        return error.message
    if isinstance(error, httpx2.HTTPStatusError):
        return f"HTTP {error.response.status_code} {error.response.reason_phrase}"
    if isinstance(error, httpx2.ConnectError):
        return f"could not connect ({error})" if str(error) else "could not connect"
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class _WatchedReadStream:
    """The transport's read stream, telling the connection when it ends (a stdio server that exited,
    an HTTP session the SDK closed), so a server lost while idle shows as failed, not running."""

    def __init__(self, inner: Any, on_end: Callable[[], None]):
        self._inner, self._on_end = inner, on_end

    @property
    def last_context(self):  # the HTTP transport's per-message context, which the dispatcher reads
        return getattr(self._inner, "last_context", None)

    async def receive(self):
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class StderrTail:
    """A stdio server's stderr, read to its end on a thread of its own (a blocking read of a pipe works on
    every platform; asyncio's pipes do not on Windows), keeping the last lines for messages. The thread
    ends when the server and whatever inherited its stderr have exited."""

    def __init__(self, name: str):
        self._lines = collections.deque[str](maxlen=STDERR_LINES)
        self._lock = threading.Lock()
        self._ended = threading.Event()
        read_fd, write_fd = os.pipe()
        self.errlog = os.fdopen(write_fd, "w")  # given to the child; ours is closed once it is spawned
        self._thread = threading.Thread(target=self._read, args=(read_fd,), name=f"mcp-stderr {name}", daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        pending = b""
        try:
            with os.fdopen(fd, "rb", buffering=0) as pipe:
                while chunk := pipe.read(65536):
                    *lines, pending = (pending + chunk).split(b"\n")
                    pending = pending[-_STDERR_LINE_CHARS * 4 :]  # one endless line cannot grow without bound
                    self._add(lines)
            self._add([pending])
        finally:
            self._ended.set()

    def _add(self, lines: list[bytes]) -> None:
        texts = [line.decode(errors="replace").rstrip()[:_STDERR_LINE_CHARS] for line in lines]
        with self._lock:
            self._lines.extend(text for text in texts if text.strip())

    def lines(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._lines)

    async def settle(self) -> None:
        """Give the reader a moment to take the last lines of a server that has just exited."""
        deadline = asyncio.get_running_loop().time() + _STDERR_DRAIN_S
        while not self._ended.is_set() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)


class Connection:
    """One server; the server config's secrets already resolved. Loop thread only."""

    def __init__(self, server: ServerConfig):
        self.server = server
        self.state = ServerState.STOPPED
        self.message = ""
        self.tools: tuple[ToolInfo, ...] = ()
        self.server_name = ""
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._lost = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._scope: anyio.CancelScope | None = None
        self._stderr: StderrTail | None = None
        self._http_error = ""  # the last HTTP error status an HTTP server answered with

    @property
    def name(self) -> str:
        return self.server.name

    def status(self) -> ServerStatus:
        return ServerStatus(
            self.name,
            self.state,
            self.message,
            self.tools,
            self.server_name,
            self.stderr_lines(),
        )

    async def start(self, timeout: float) -> tuple[ToolInfo, ...]:
        """Start the server and list its tools; McpServerError or McpTimeoutError says why it did not start."""
        ready = asyncio.get_running_loop().create_future()
        self.state = ServerState.STARTING
        self._task = asyncio.create_task(self._run(ready, timeout), name=f"mcp server {self.name}")
        return await ready

    async def stop(self, timeout: float) -> None:
        """Leave the server (a stdio child is closed, then terminated, then killed: the SDK's bounded
        sequence); after timeout, the task is cancelled as well."""
        self._stopping = True
        self._stop.set()
        if self._scope is not None and self.state == ServerState.STARTING:
            self._scope.cancel()
        if self._task is not None and not self._task.done():
            done, _ = await asyncio.wait({self._task}, timeout=timeout)
            if not done:
                log.warning("MCP server %s did not stop in %.0f s; cancelling its task", self.name, timeout)
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=timeout)
        if self.state != ServerState.FAILED:
            self.state, self.message = ServerState.STOPPED, ""

    async def _run(self, ready: asyncio.Future, timeout: float) -> None:
        try:
            # One scope for the whole life: its deadline bounds the start and is lifted once running
            # (a scope of its own around the start would close before the transport's task groups do).
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as self._scope:
                async with contextlib.AsyncExitStack() as stack:
                    streams = await stack.enter_async_context(self._transport())
                    watched = (_WatchedReadStream(streams[0], self._lost.set), streams[1])
                    client = await stack.enter_async_context(Client(_Ready(watched), client_info=CLIENT_INFO))
                    self.tools = await self._list_tools(client)
                    self._scope.deadline = math.inf
                    info = client.server_info
                    self.server_name = f"{info.name} {info.version}".strip() if info is not None else ""
                    self._client, self.state, self.message = client, ServerState.RUNNING, ""
                    ready.set_result(self.tools)
                    await _first(self._stop.wait(), self._lost.wait())
                    self._client = None
                    if self._lost.is_set() and not self._stopping:  # said at once, before the SDK's own cleanup
                        await self._settle_stderr()
                        self.state = ServerState.FAILED
                        self.message = self._with_stderr(f"{self.name} stopped on its own")
            if self._scope.cancelled_caught and not ready.done():
                if self._stopping:
                    raise McpServerError(f"{self.name}: stopped while starting")
                raise TimeoutError
        except BaseException as e:  # noqa: BLE001 - every way out becomes the connection's state
            self._client = None
            error = await self._failure(e, starting=not ready.done())
            if not ready.done():
                ready.set_exception(error)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        finally:
            self._client = None
        if not self._stopping and self.state != ServerState.FAILED:
            self.state = ServerState.STOPPED

    async def _failure(self, error: BaseException, *, starting: bool) -> McpError:
        await self._settle_stderr()
        leaf = _leaf(error)
        if isinstance(leaf, McpError):
            result = leaf
        elif isinstance(leaf, TimeoutError) and starting:
            result = McpTimeoutError(
                self._with_stderr(f"{self.name} did not start: no answer in the time allowed"),
                "The server may be waiting for something, or be slow to install itself on first use; try again.",
            )
        elif isinstance(leaf, FileNotFoundError) and self.server.cwd and leaf.filename == self.server.cwd:
            result = McpServerError(f"{self.name} did not start: its folder {self.server.cwd!r} does not exist")
        elif isinstance(leaf, FileNotFoundError) and not self.server.is_http:
            result = McpServerError(
                f"{self.name} did not start: the command {self.server.command!r} was not found",
                "Check the command, or give its full path (the app may not see your shell's PATH).",
            )
        elif self._http_error:
            what = "did not start" if starting else "stopped"
            refused = self._http_error.startswith(("HTTP 401", "HTTP 403"))
            # A server of the older SSE transport refuses streamable HTTP's POST.
            older = self._http_error.startswith("HTTP 405") and not self.server.is_sse
            result = McpServerError(
                f"{self.name} {what}: the server answered {self._http_error}",
                "Check the token or key in the server's headers."
                if refused
                else 'It may speak the older SSE transport: give it "type": "sse", or its /sse address.'
                if older
                else "",
            )
        else:
            what = "did not start" if starting else "stopped"
            result = McpServerError(
                self._with_stderr(f"{self.name} {what}: {_describe(leaf)}"), stderr_tail=self.stderr_lines()
            )
        if not isinstance(leaf, asyncio.CancelledError) or starting:
            self.state, self.message = ServerState.FAILED, str(result)
        if not isinstance(leaf, (McpError, asyncio.CancelledError)):
            log.info("MCP server %s: %s", self.name, result, exc_info=leaf)
        return result

    def stderr_lines(self) -> tuple[str, ...]:
        return self._stderr.lines() if self._stderr is not None else ()

    def _with_stderr(self, message: str) -> str:
        lines = self.stderr_lines()
        return message + (".\nIts last output:\n" + "\n".join(lines) if lines else ".")

    async def _settle_stderr(self) -> None:
        if self._stderr is not None:
            await self._stderr.settle()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        if self.server.is_http:
            if not self.server.allow_network:
                raise McpServerError(f"{self.name}: not allowed on the network", "Allow it in the server's settings.")
            headers = dict(self.server.headers) or None
            if self.server.is_sse:  # the SSE transport makes its own clients, with the same hook
                async with sse_client(self.server.url, headers, httpx_client_factory=self._http_client) as streams:
                    yield streams
                return
            async with (
                self._http_client(headers) as http,
                streamable_http_client(self.server.url, http_client=http) as streams,
            ):
                yield streams
            return
        self._stderr = StderrTail(self.name)
        errlog = self._stderr.errlog
        params = StdioServerParameters(
            command=self.server.command,
            args=list(self.server.args),
            env=dict(self.server.env) or None,
            cwd=self.server.cwd or None,
        )
        try:
            async with stdio_client(params, errlog=errlog) as streams:
                errlog.close()  # the child holds its own copy: the reader sees the end when the server exits
                yield streams
        finally:
            errlog.close()

    def _http_client(self, headers: dict[str, str] | None = None, timeout=None, auth=None) -> httpx2.AsyncClient:
        """The SDK's client, noting HTTP errors: the SDK turns one into "Server returned an error response",
        and its status says which (401 and 403 mean the headers' token, 404 the address)."""
        http = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
        http.event_hooks["response"].append(self._note_http_status)
        return http

    async def _note_http_status(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._http_error = f"HTTP {response.status_code} {response.reason_phrase}".strip()

    async def _list_tools(self, client: Client) -> tuple[ToolInfo, ...]:
        if client.server_capabilities.tools is None:  # a server of prompts or resources only: no tools to offer
            return ()
        tools, cursor = [], None
        for _ in range(100):  # a server that pages forever cannot hold the start
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")  # always the server's own answer
            tools += [ToolInfo(self.name, t.name, t.description or "", dict(t.input_schema)) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    async def refresh_tools(self) -> tuple[ToolInfo, ...]:
        self.tools = await self._list_tools(self._running())
        return self.tools

    def _running(self) -> Client:
        if self._client is None or self.state != ServerState.RUNNING or self._lost.is_set():
            why = f": {self.message}" if self.message else ""
            raise McpServerError(f"{self.name} is not running{why}")
        return self._client

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float, scope: anyio.CancelScope) -> ToolResult:
        """Call tool; scope, entered here, is how another thread cancels the call (McpCancelled)."""
        client = self._running()
        with scope:
            with anyio.move_on_after(timeout) as deadline:
                try:
                    result = await client.call_tool(tool, arguments)
                except MCPError as e:
                    if self._lost.is_set() or e.code == CONNECTION_CLOSED:
                        await self._settle_stderr()
                        raise McpServerError(
                            self._with_stderr(f"{self.name} stopped during the call to {tool}: {e.message}"),
                            stderr_tail=self.stderr_lines(),
                        ) from None
                    generic = e.message == "Server returned an error response"  # the SDK's words for any HTTP error
                    reason = f"the server answered {self._http_error}" if generic and self._http_error else e.message
                    raise McpServerError(f"{self.name} refused the call to {tool}: {reason}") from None
                except (httpx2.HTTPError, OSError) as e:
                    raise McpServerError(f"{self.name}: the call to {tool} failed: {_describe(e)}") from None
        if scope.cancelled_caught:
            raise McpCancelled(f"The call to {tool} on {self.name} was cancelled")
        if deadline.cancelled_caught:
            raise McpTimeoutError(f"{tool} on {self.name} did not answer within {timeout:g} s; the call was cancelled")
        text = result_text(result.content, result.structured_content)
        if result.is_error:
            raise McpToolError(f"{tool} on {self.name} reported an error: {text}", text=text)
        return ToolResult(text, result.structured_content)


class _Ready:
    """Streams already opened, as a Transport for Client (which enters what it is given)."""

    def __init__(self, streams):
        self._streams = streams

    async def __aenter__(self):
        return self._streams

    async def __aexit__(self, *exc) -> None:
        return None


async def _first(*waits) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
