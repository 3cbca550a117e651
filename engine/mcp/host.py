"""The MCP host: the user's MCP servers behind a synchronous, thread-safe API.

The SDK is asyncio; the app and the engine are threads. McpHost owns one background thread that runs an
event loop, started with the first server (a host with no servers has no thread, no loop, no socket),
and every public method hands work to that loop and waits on a future, always with a timeout. The
*_async methods return at once (a GUI thread uses those and never waits). Done callbacks run on the
host's thread: from there only the *_async methods and close() may be called (the blocking ones raise
RuntimeError rather than wait on themselves).

    host = McpHost()
    tools = host.start(config.servers["files"], secrets={...})    # blocks up to its timeout
    future = host.start_async(server, secrets)                     # or not: a concurrent.futures.Future
    call = host.call_async("files", "read_file", {"path": "a.py"}, timeout=60)
    call.cancel()                                                  # from any thread
    call.result()                                                  # ToolResult, or raises an McpError
    host.close()                                                   # stops every server; bounded
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any

import anyio

from engine.mcp.config import ServerConfig, resolve_secrets
from engine.mcp.connection import Connection
from engine.mcp.errors import McpCancelled, McpConfigError, McpError, McpServerError, McpTimeoutError
from engine.mcp.results import ServerState, ServerStatus, ToolInfo, ToolResult

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # npx and uvx servers install themselves on first start
CALL_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 8.0  # the SDK closes stdin, waits 2 s, terminates, waits 2 s, kills: under 8 s in all
_SLACK_S = 5.0  # a caller waits this much longer than the loop's own deadline, in case the loop is busy


class ToolCall:
    """A tool call in flight. result() waits for it; cancel() ends it from any thread (result() then raises
    McpCancelled). The call also ends by itself at its timeout (McpTimeoutError)."""

    def __init__(self, server: str, tool: str, timeout: float):
        self.server, self.tool, self.timeout = server, tool, timeout
        self._scope: anyio.CancelScope | None = None  # made on the loop, when the call begins there
        self._future: concurrent.futures.Future[ToolResult] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancel_requested = threading.Event()

    def cancel(self) -> None:
        self._cancel_requested.set()
        if self._loop is not None and not self._future.done():
            with contextlib.suppress(RuntimeError):  # the loop has closed: the call is over already
                self._loop.call_soon_threadsafe(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def done(self) -> bool:
        return self._future.done()

    def add_done_callback(self, fn) -> None:
        """fn(self) once the call is over, on the host's thread (on the caller's, at once, when it is over
        already): queue the outcome to the GUI's thread, never touch widgets in fn."""
        self._future.add_done_callback(lambda _: fn(self))

    def result(self, timeout: float | None = None) -> ToolResult:
        """The tool's result; raises McpToolError (the tool said it failed), McpTimeoutError, McpCancelled
        or McpServerError. timeout: how long to wait here (default: the call's own timeout, plus slack)."""
        wait = self.timeout + _SLACK_S if timeout is None else timeout
        try:
            return self._future.result(wait)
        except concurrent.futures.TimeoutError:
            if timeout is not None:
                raise McpTimeoutError(f"{self.tool} on {self.server} has not answered yet") from None
            self.cancel()
            raise McpTimeoutError(f"{self.tool} on {self.server} did not answer; the call was cancelled") from None


class McpHost:
    """Runs the user's MCP servers, each under its name. Thread-safe; see the module's docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Connection] = {}
        self._closed = False

    # The loop's thread, started on first use.

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise McpError("The MCP host is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(target=self._run_loop, args=(loop, started), name="mcp-host", daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
            leftover = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftover:
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.wait(leftover, timeout=STOP_TIMEOUT_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def _submit(self, coro, wait: float):
        try:
            loop = self._ensure_loop()
            if threading.current_thread() is self._thread:
                raise RuntimeError("McpHost methods wait on the host's thread: call them from another thread")
        except BaseException:
            coro.close()  # never to run: closed, so no 'never awaited' warning
            raise
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpTimeoutError("The MCP host did not answer in time") from None

    # Servers.

    def start(
        self, server: ServerConfig, secrets: Mapping[str, str] | None = None, *, timeout: float = START_TIMEOUT_S
    ) -> tuple[ToolInfo, ...]:
        """Start server (stopping one already running under its name) and list its tools. secrets: the
        values of its "${keyring:ID}" references by ID. Blocks until it answers; raises McpConfigError
        (a missing secret, network not allowed), McpServerError (would not start: the message says why,
        with its last stderr lines) or McpTimeoutError."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("McpHost.start waits on the host's thread: call it from another thread")
        future = self.start_async(server, secrets, timeout=timeout)
        try:
            return future.result(timeout + STOP_TIMEOUT_S + _SLACK_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpTimeoutError(f"{server.name} did not start: the MCP host did not answer in time") from None

    def start_async(
        self, server: ServerConfig, secrets: Mapping[str, str] | None = None, *, timeout: float = START_TIMEOUT_S
    ) -> concurrent.futures.Future[tuple[ToolInfo, ...]]:
        """start() without waiting: the future's result is the tools, or the error start() raises (a GUI
        adds a done callback that queues the outcome to its own thread)."""
        future: concurrent.futures.Future[tuple[ToolInfo, ...]] = concurrent.futures.Future()
        try:
            resolved = resolve_secrets(server, secrets or {})
            if resolved.is_http and not resolved.allow_network:
                raise McpConfigError(
                    f"{server.name} is an HTTP server and is not allowed on the network",
                    "Allow it in the server's settings first.",
                )
            loop = self._ensure_loop()
        except McpError as e:
            future.set_exception(e)
            return future
        asyncio.run_coroutine_threadsafe(self._start(resolved, timeout), loop).add_done_callback(
            lambda f: _settle(future, f)
        )
        return future

    async def _start(self, server: ServerConfig, timeout: float) -> tuple[ToolInfo, ...]:
        old = self._connections.get(server.name)
        if old is not None:
            await old.stop(STOP_TIMEOUT_S)
        connection = Connection(server)
        self._connections[server.name] = connection
        return await connection.start(timeout)

    def stop(self, name: str) -> None:
        """Stop a server (nothing happens when it is not running); bounded by STOP_TIMEOUT_S, twice at worst."""
        if self._loop is None or name not in self._connections:
            return
        self._submit(self._stop(name), 2 * STOP_TIMEOUT_S + _SLACK_S)

    def stop_async(self, name: str) -> concurrent.futures.Future[None]:
        """stop() without waiting."""
        if self._loop is None or name not in self._connections or self._closed:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        return asyncio.run_coroutine_threadsafe(self._stop(name), self._loop)

    async def _stop(self, name: str) -> None:
        connection = self._connections.pop(name, None)
        if connection is not None:
            await connection.stop(STOP_TIMEOUT_S)

    def status(self, name: str) -> ServerStatus:
        """The server's state now (STOPPED when it was never started or has been stopped)."""
        connection = self._connections.get(name)
        if connection is None:
            return ServerStatus(name, ServerState.STOPPED)
        return connection.status()

    def statuses(self) -> dict[str, ServerStatus]:
        return {name: connection.status() for name, connection in list(self._connections.items())}

    def tools(self, name: str, *, refresh: bool = False) -> tuple[ToolInfo, ...]:
        """The tools a running server listed when it started (refresh: ask it again)."""
        connection = self._connection(name)
        if refresh:
            return self._submit(connection.refresh_tools(), CALL_TIMEOUT_S)
        return connection.tools

    def _connection(self, name: str) -> Connection:
        connection = self._connections.get(name)
        if connection is None:
            raise McpServerError(f"{name} is not running")
        return connection

    # Tool calls.

    def call_async(
        self, server: str, tool: str, arguments: Mapping[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S
    ) -> ToolCall:
        """Start a call and return at once; see ToolCall."""
        call = ToolCall(server, tool, timeout)
        try:
            loop = self._ensure_loop()
            connection = self._connection(server)
        except McpError as e:
            call._future.set_exception(e)
            return call
        call._loop = loop

        async def run() -> ToolResult:
            call._scope = anyio.CancelScope()
            if call._cancel_requested.is_set():  # cancelled before it began here
                raise McpCancelled(f"The call to {tool} on {server} was cancelled")
            return await connection.call(tool, dict(arguments or {}), timeout, call._scope)

        asyncio.run_coroutine_threadsafe(run(), loop).add_done_callback(lambda f: _settle(call._future, f))
        return call

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S
    ) -> ToolResult:
        """Call a tool and wait for its result (see ToolCall.result for what it raises)."""
        return self.call_async(server, tool, arguments, timeout=timeout).result()

    # Closing.

    def close(self, timeout: float = 2 * STOP_TIMEOUT_S) -> None:
        """Stop every server and the loop's thread. Bounded: servers that will not stop are cancelled
        (their children killed by the SDK), and the thread is not waited on past timeout + slack."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():  # from a done callback: it cannot wait on its own thread
            loop.create_task(self._stop_all()).add_done_callback(lambda _: loop.stop())
            return
        stopping = asyncio.run_coroutine_threadsafe(self._stop_all(), loop)
        try:
            stopping.result(timeout + _SLACK_S)
        except Exception:  # noqa: BLE001 - closing goes on whatever a server did
            log.warning("MCP servers did not all stop cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_S + _SLACK_S)
        if thread.is_alive():
            log.warning("the MCP host's thread did not end")

    async def _stop_all(self) -> None:
        names = list(self._connections)
        await asyncio.gather(*(self._stop(name) for name in names), return_exceptions=True)

    def __enter__(self) -> McpHost:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _settle(target: concurrent.futures.Future, source: concurrent.futures.Future) -> None:
    """Hand the loop's outcome to the caller's future, as an McpError whatever went wrong."""
    if target.done():  # the caller gave up on it
        return
    if source.cancelled():
        target.set_exception(McpCancelled("Cancelled"))
    elif source.exception() is not None:
        error = source.exception()
        if not isinstance(error, McpError):
            error = McpServerError(f"The call failed: {type(error).__name__}: {error}")
        target.set_exception(error)
    else:
        target.set_result(source.result())
