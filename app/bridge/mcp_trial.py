"""Trying an MCP server from its settings: start it on a private McpHost, list its tools, stop it.

Nothing here runs on the GUI thread: the host's first use imports the SDK (about a second), and a start
may take up to the host's start timeout (npx and uvx servers install themselves first). The host is the
dialog's own, never the chat's, so a server being edited is never offered to a chat by a test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from PySide6.QtCore import QObject

from app.bridge.hub_tasks import BackgroundTasks
from engine.mcp import McpError, ServerConfig, ToolInfo

TRIAL_START_S = 60.0  # as the host's own start timeout: a first npx start downloads the server


class ServerTrial(QObject):
    """test() starts a server and reports its tools or why it would not start; close() ends it all."""

    def __init__(self, parent: QObject | None = None, *, start_timeout: float = TRIAL_START_S):
        super().__init__(parent)
        self.start_timeout = start_timeout
        self.tasks = BackgroundTasks(self, max_threads=2)
        self._lock = threading.Lock()
        self._host = None  # McpHost, made on a pool thread at the first test
        self._closed = False

    def _the_host(self):
        with self._lock:
            if self._closed:
                raise McpError("The server's test was abandoned: the dialog closed")
            if self._host is None:
                from engine.mcp import McpHost  # the SDK, imported here: off the GUI thread

                self._host = McpHost()
            return self._host

    def test(
        self,
        server: ServerConfig,
        secrets: Mapping[str, str] | None,
        on_tools: Callable[[tuple[ToolInfo, ...]], None],
        on_error: Callable[[str], None],
    ) -> None:
        """Start server, then stop it once it listed its tools. on_tools(tools) or on_error(message, with
        the server's last stderr lines) runs on the GUI thread; neither after close()."""
        timeout = self.start_timeout

        def run(_report) -> tuple[ToolInfo, ...]:
            host = self._the_host()
            try:
                # start() waits on its start_async future: this is a pool thread, not the GUI's.
                return host.start(server, secrets, timeout=timeout)
            finally:
                host.stop_async(server.name)  # a test leaves nothing running

        self.tasks.start(run, on_tools, on_error)

    def close(self) -> threading.Thread | None:
        """Stop whatever is starting, off the GUI thread (the host's close is bounded, yet may take
        seconds). Returns the thread that closes the host (None when no test ever ran); it is not a
        daemon, so the app's exit waits for the servers' children to be gone."""
        with self._lock:
            self._closed, host = True, self._host
        self.tasks.wait(0)  # results that arrive from now on are dropped
        if host is None:
            return None
        closer = threading.Thread(target=host.close, name="mcp-trial-close")
        closer.start()
        return closer
