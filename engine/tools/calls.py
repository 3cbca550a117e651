"""The vocabulary of tool use: a tool offered to the model, a call it made, a call it botched.

The shapes are OpenAI's (`{"type": "function", "function": {...}}`), which chat templates also take
(Hugging Face's convention): a ToolSpec renders into a template as it arrives from a client, and a
ToolCall goes back into one with its arguments as an object, into an API response as a JSON string.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

_ALNUM = string.ascii_letters + string.digits


class ToolChoiceMode(str, Enum):
    """OpenAI's tool_choice: may the model call, must it, must it not."""

    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    FUNCTION = "function"  # one named function (ToolChoice.name)


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str = ""  # the function, for ToolChoiceMode.FUNCTION

    @property
    def must_call(self) -> bool:
        return self.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.FUNCTION)


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: its name, what it does, and a JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def as_openai(self) -> dict:
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}

    @classmethod
    def from_openai(cls, tool: Any) -> ToolSpec:
        """OpenAI's tool object; ValueError says what is wrong with it."""
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise ValueError('a tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}')
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ValueError("function must be an object with a name")
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("function.name must be a non-empty string")
        description = function.get("description") or ""
        if not isinstance(description, str):
            raise ValueError("function.description must be a string")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ValueError("function.parameters must be a JSON schema object")
        return cls(name, description, parameters)


@dataclass(frozen=True)
class ToolCall:
    """A complete call the model made: arguments parsed (always a JSON object), raw as it wrote it."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str = ""  # the model's own text for the call, markers included ("" when it came from a client)

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def as_openai(self) -> dict:
        """In an API response or request: arguments as a JSON string."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}

    def for_template(self) -> dict:
        """In a chat template: arguments as an object (templates write them with `| tojson`)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class MalformedToolCall:
    """Text the model wrote as a tool call that is not one: reported as it is, never repaired."""

    raw: str
    reason: str  # "the arguments are not JSON: Expecting ',' delimiter at 31"


def new_call_id(short: bool = False) -> str:
    """An id for a call: OpenAI's `call_...`, or 9 letters and digits (Mistral's templates insist on it)."""
    if short:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)


def json_quoted(text: str) -> str:
    """text as the inside of a JSON string, the way a call's arguments quote it (newlines as \\n)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]
