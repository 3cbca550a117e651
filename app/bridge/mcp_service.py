"""The window's MCP servers: started when a chat first needs them, their tools offered to the model, calls run.

McpService owns one engine.mcp.McpHost. Nothing here waits: a server starts with start_async and a call
runs with call_async; their done callbacks run on the host's thread and only emit this object's signals,
which Qt queues to the GUI thread (this QObject lives there). With no server configured, or none ticked in
a chat, no host is made: no thread, no process, no socket (the offline guarantee).

Secrets: a server's "${keyring:ID}" references are looked up with the app's ApiKeys when it starts, and
handed to the host; they never reach mcp.json, a log or a message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from engine import ToolSpec
from engine.errors import user_message
from engine.mcp import McpCancelled, McpConfig, McpError, McpTimeoutError, McpToolError, load_config

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 8.0  # window shutdown waits at most this (plus the host's slack) for servers to stop


@dataclass(frozen=True)
class OfferedTool:
    server: str
    spec: ToolSpec


@dataclass(frozen=True)
class CallOutcome:
    """How a tool call ended. error_kind: "" (a result), "tool" (the tool reported an error: text is what
    it said, for the model), "timeout", "cancelled" or "server" (it would not start, crashed, is gone)."""

    key: int
    text: str = ""
    error: str = ""
    error_kind: str = ""
    elapsed_s: float = 0.0


class McpService(QObject):
    server_started = Signal(str)  # name: running, its tools listed
    server_failed = Signal(str, str)  # name, why (the host's message, with the server's last stderr lines)
    call_finished = Signal(object)  # CallOutcome
    _start_done = Signal(str, object, object)  # name, tools or None, error or None (from the host's thread)

    def __init__(self, api_keys, config: Callable[[], McpConfig] = load_config, parent: QObject | None = None):
        """api_keys: where the servers' secrets are (app.core.api_keys.ApiKeys: get(id) -> value or None).
        config: reads mcp.json (each call: what the user edited since is used from the next start)."""
        super().__init__(parent)
        self.api_keys = api_keys
        self._read_config = config
        self._host = None  # engine.mcp.McpHost, made with the first server started
        self._tools: dict[str, tuple[OfferedTool, ...]] = {}  # running servers' tools
        self._starting: set[str] = set()
        self._failed: dict[str, str] = {}  # name -> why, until it is started again
        self._calls: dict[int, object] = {}  # key -> engine.mcp.ToolCall in flight
        self._next_key = 1
        self._closed = False
        self._start_done.connect(self._on_start_done)

    # -- servers ------------------------------------------------------------------------------

    def config(self) -> McpConfig:
        return self._read_config()

    def server_names(self) -> list[str]:
        """The servers configured in mcp.json that can be used (a broken entry is left out)."""
        return list(self.config().servers)

    @property
    def started(self) -> bool:
        """Whether a host (its thread) was ever made."""
        return self._host is not None

    def ensure(self, names: Sequence[str]) -> None:
        """Start those of the servers that are neither running nor starting (a failed one is tried again)."""
        if self._closed:
            return
        config = self.config()
        for name in names:
            if name in self._tools or name in self._starting:
                continue
            server = config.servers.get(name)
            if server is None:
                why = config.problems.get(name) or f"{name} is no longer in your MCP servers"
                self._failed[name] = why
                self.server_failed.emit(name, why)
                continue
            self._failed.pop(name, None)
            self._starting.add(name)
            secrets = {sid: value for sid in server.secret_ids() if (value := self.api_keys.get(sid)) is not None}
            future = self.host().start_async(server, secrets)
            future.add_done_callback(lambda f, name=name: self._start_done.emit(name, *_outcome(f)))

    def timeout_s(self, name: str) -> float | None:
        """The limit mcp.json sets for one call to this server's tools ("timeout"), or None."""
        server = self.config().servers.get(name)
        return server.timeout_s if server is not None else None

    def pending(self, names: Sequence[str]) -> bool:
        """Whether any of the servers is still starting."""
        return any(name in self._starting for name in names)

    def failure(self, name: str) -> str:
        return self._failed.get(name, "")

    def tools(self, names: Sequence[str]) -> list[OfferedTool]:
        """The running servers' tools, in the order named; a name two servers use is offered once (the first)."""
        offered: dict[str, OfferedTool] = {}
        for name in names:
            for tool in self._tools.get(name, ()):
                offered.setdefault(tool.spec.name, tool)
        return list(offered.values())

    def host(self):
        if self._host is None:
            from engine.mcp import McpHost  # the SDK loads here, with the first server

            self._host = McpHost()
        return self._host

    def _on_start_done(self, name: str, tools, error) -> None:
        self._starting.discard(name)
        if self._closed:
            return
        if error is not None:
            self._tools.pop(name, None)
            self._failed[name] = user_message(error)
            self.server_failed.emit(name, self._failed[name])
            return
        offered = []
        for info in tools:
            try:
                offered.append(OfferedTool(name, ToolSpec.from_openai(info.as_openai())))
            except ValueError as e:  # a tool the model could not be shown: the others still are
                log.warning("%s: tool %s left out: %s", name, info.name, e)
        self._tools[name] = tuple(offered)
        self.server_started.emit(name)

    # -- calls --------------------------------------------------------------------------------

    def call(self, server: str, tool: str, arguments: dict, timeout: float) -> int:
        """Run a tool; its CallOutcome comes as call_finished with the key returned here."""
        key, self._next_key = self._next_key, self._next_key + 1
        began = time.perf_counter()
        call = self.host().call_async(server, tool, arguments, timeout=timeout)
        self._calls[key] = call
        call.add_done_callback(lambda c: self._call_done(key, c, time.perf_counter() - began))
        return key

    def cancel(self, key: int) -> None:
        """Stop a call in flight (its outcome then says cancelled)."""
        if (call := self._calls.get(key)) is not None:
            call.cancel()

    def _call_done(self, key: int, call, elapsed_s: float) -> None:
        """On the host's thread: only a signal (queued to the GUI thread)."""
        try:
            result = call.result(0)
        except McpToolError as e:
            outcome = CallOutcome(key, e.text, str(e), "tool", elapsed_s)
        except McpTimeoutError as e:
            outcome = CallOutcome(key, error=user_message(e), error_kind="timeout", elapsed_s=elapsed_s)
        except McpCancelled as e:
            outcome = CallOutcome(key, error=str(e), error_kind="cancelled", elapsed_s=elapsed_s)
        except McpError as e:
            outcome = CallOutcome(key, error=user_message(e), error_kind="server", elapsed_s=elapsed_s)
        else:
            outcome = CallOutcome(key, result.text, elapsed_s=elapsed_s)
        self.call_finished.emit(outcome)

    def forget_call(self, key: int) -> None:
        self._calls.pop(key, None)

    def server_lost(self, name: str, why: str) -> None:
        """A call found the server gone: it is started afresh when a chat needs it next."""
        self._tools.pop(name, None)
        self._failed[name] = why

    # -- closing ------------------------------------------------------------------------------

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every server and the host's thread (bounded); nothing to do when none was started."""
        self._closed = True
        for call in list(self._calls.values()):
            call.cancel()
        if self._host is not None:
            self._host.close(timeout)


def _outcome(future) -> tuple[object, object]:
    """(result, None) or (None, error) of a finished future."""
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)
