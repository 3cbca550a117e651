"""What can go wrong with MCP servers, one kind per thing the user does about it.

All derive from engine.errors.EngineError: str(error) is the message to show, with the server's name in it.
"""

from __future__ import annotations

from engine.errors import EngineError, OperationCancelled


class McpError(EngineError):
    """An MCP server or one of its tools failed."""


class McpConfigError(McpError):
    """A server's entry cannot be used as it stands (a missing secret, a network server not allowed)."""

    hint = "Check the server's settings."


class McpServerError(McpError):
    """A server would not start, or stopped or broke off while in use. stderr_tail: its last lines of
    stderr (stdio servers), already in the message."""

    hint = "Check the server's command or address; the server's own output above may say more."

    def __init__(self, message: str, hint: str = "", *, stderr_tail: tuple[str, ...] = ()):
        super().__init__(message, hint)
        self.stderr_tail = stderr_tail


class McpTimeoutError(McpError):
    """A server did not start, or a tool did not answer, in the time allowed (the call was then cancelled)."""

    hint = "The tool may be stuck or the task too long for it; try again or raise the time allowed."


class McpToolError(McpError):
    """The tool ran and reported an error (an isError result). text: what the tool said, for the model
    to read and correct itself."""

    hint = ""

    def __init__(self, message: str, *, text: str):
        super().__init__(message)
        self.text = text


class McpCancelled(McpError, OperationCancelled):
    """A call was cancelled on request: not a failure of the tool."""
