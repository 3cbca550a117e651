"""A small MCP server for the host's tests, written with the SDK: tools that answer, hang, fail, crash
the server, or answer with an image. Run as `python tests/mcp_servers.py [--exit-at-once]` (stdio)."""

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent

server = MCPServer("specula-test-server", version="1.0", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Answer with the text given."""
    return text


@server.tool()
async def slow(seconds: float) -> str:
    """Wait that long, then answer."""
    await anyio.sleep(seconds)
    return "done waiting"


@server.tool()
def fail() -> str:
    """Report an error, as a tool does."""
    raise ToolError("the disk is on fire")


@server.tool()
def crash() -> str:
    """Take the whole server down mid-call."""
    print("about to crash: simulated fault", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def picture() -> list:
    """Answer with a caption and a (tiny) image."""
    return [TextContent(text="a red dot"), ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]


@server.tool()
def environment(name: str) -> str:
    """The value of an environment variable (checks that env reaches the server)."""
    return os.environ.get(name, "(unset)")


if __name__ == "__main__":
    if "--exit-at-once" in sys.argv:
        print("fatal: MY_TOKEN is not set", file=sys.stderr, flush=True)
        sys.exit(2)
    server.run("stdio")
