"""What the host hands back: a server's tools, a tool's result as text, a server's status. Plain records,
no SDK types, so the app and the tool-call layer need not import the SDK."""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolInfo:
    """One tool as its server describes it: input_schema is a JSON Schema object, as the model is shown it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    def as_openai(self) -> dict[str, Any]:
        """The tool in OpenAI's shape, as engine.tools.ToolSpec.from_openai and the local server take it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.input_schema
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer as text for the model (images, audio and resources summarised in a line each).
    structured: the tool's structured content when it gave one, else None."""

    text: str
    structured: Any = None


class ServerState(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"  # would not start, or stopped on its own: message says why


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: ServerState
    message: str = ""
    tools: tuple[ToolInfo, ...] = ()
    server_name: str = ""  # what the server calls itself, with its version
    stderr_tail: tuple[str, ...] = field(default=(), repr=False)


def _size(data: str) -> str:
    try:
        n = len(base64.b64decode(data, validate=False))
    except ValueError:
        n = len(data) * 3 // 4
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def content_text(blocks: list[Any]) -> str:
    """The content blocks of a tool result (mcp_types) as text, in order."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, {_size(block.data)}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(f"[resource {resource.uri}]\n{text}")
            else:
                mime = getattr(resource, "mime_type", None) or "binary"
                parts.append(f"[resource {resource.uri}: {mime}, {_size(resource.blob)}]")
        elif kind == "resource_link":
            about = f": {block.description}" if getattr(block, "description", None) else ""
            parts.append(f"[link to {block.uri} ({block.name}){about}]")
        else:
            parts.append(f"[{kind or type(block).__name__} content]")
    return "\n".join(parts)


def result_text(blocks: list[Any], structured: Any) -> str:
    text = content_text(blocks)
    if not text and structured is not None:  # a tool that answers with structured content alone
        text = json.dumps(structured, ensure_ascii=False)
    return text
