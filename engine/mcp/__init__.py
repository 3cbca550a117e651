"""MCP: the user's MCP servers (stdio programs, streamable HTTP and SSE servers), their tools, and calls to them.

Qt-free, like the rest of the engine, and on the official SDK (`mcp`). The public shape:

- Configuration (engine.mcp.config): `load_config()` / `save_config()` read and write Specula's mcp.json
  in the mcpServers notation of LM Studio, Claude Desktop and Cursor; `McpConfig` holds the valid
  `ServerConfig`s and, by name, the problems of the others. Env and header values are secrets: the app
  keeps them in the keyring (`move_secrets_out`), the file holds "${keyring:ID}", and the host is given
  the values when it starts a server. An HTTP server is used only with `allow_network`.
- Import (engine.mcp.other_apps): `find_importable()` lists the other apps' files found here;
  `import_servers()` copies the chosen servers in, renaming on a clash.
- The host (engine.mcp.host): `McpHost` runs the servers on its own thread behind a blocking,
  thread-safe API: `start`, `stop`, `tools`, `call` / `call_async` (a cancellable `ToolCall`), `status`,
  `close`. With no server started it has no thread and opens nothing.
- Failures: the `McpError` kinds in engine.mcp.errors; str(error) says what happened, with the server's
  name and, for a stdio server, its last lines of stderr.
- Importing engine.mcp is cheap: the SDK (about a second to import) loads with McpHost, on first use.
- A server to try: `python -m engine.mcp.workspace_server ROOT [--http PORT]`.
"""

from engine.mcp.config import (
    McpConfig,
    ServerConfig,
    load_config,
    move_secrets_out,
    parse_config,
    resolve_secrets,
    save_config,
    secret_ref,
)
from engine.mcp.errors import (
    McpCancelled,
    McpConfigError,
    McpError,
    McpServerError,
    McpTimeoutError,
    McpToolError,
)
from engine.mcp.other_apps import ImportSource, find_importable, import_servers
from engine.mcp.results import ServerState, ServerStatus, ToolInfo, ToolResult

__all__ = [
    "ImportSource",
    "McpCancelled",
    "McpConfig",
    "McpConfigError",
    "McpError",
    "McpHost",
    "McpServerError",
    "McpTimeoutError",
    "McpToolError",
    "ServerConfig",
    "ServerState",
    "ServerStatus",
    "ToolCall",
    "ToolInfo",
    "ToolResult",
    "find_importable",
    "import_servers",
    "load_config",
    "move_secrets_out",
    "parse_config",
    "resolve_secrets",
    "save_config",
    "secret_ref",
]


def __getattr__(name: str):
    # The host imports the SDK (pydantic models, httpx2, anyio): loaded when first asked for, so reading the
    # configuration does not pay for it.
    if name in ("McpHost", "ToolCall"):
        from engine.mcp import host

        return getattr(host, name)
    raise AttributeError(f"module 'engine.mcp' has no attribute {name!r}")
