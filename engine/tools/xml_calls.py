"""The body of a call in the XML form that Qwen3-Coder and Qwen3.5 are trained on, between `<tool_call>`
and `</tool_call>`:

    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>

A value is raw text (a string may span lines, and holds no JSON quoting); a value of another type is
its JSON (`3`, `true`, `["a", "b"]`). The tool's schema says which: a parameter typed string keeps its
text, one typed otherwise must parse as that type, or the call is reported. Without a type, text that
parses as JSON other than a string is that value, anything else the text.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_JSON_TYPES = {"integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


class XmlCallError(ValueError):
    """Why the body is not a call (for MalformedToolCall's reason)."""


def parse_xml_call(body: str, schemas: dict[str, dict]) -> tuple[str, dict[str, Any]]:
    """The call's function name and arguments; XmlCallError says what is wrong.
    schemas: each tool's parameters schema by name (a tool not in it gets no type checks)."""
    match = _FUNCTION.fullmatch(body)
    if match is None:
        raise XmlCallError("the call is not a <function=name> block closed by </function>")
    name, inner = match.group(1).strip(), match.group(2)
    properties = (schemas.get(name) or {}).get("properties") or {}
    arguments: dict[str, Any] = {}
    end = 0
    for parameter in _PARAMETER.finditer(inner):
        if inner[end : parameter.start()].strip():
            raise XmlCallError(f"the call to {name} has text outside its <parameter> blocks")
        end = parameter.end()
        key = parameter.group(1).strip()
        arguments[key] = _value(name, key, _unpadded(parameter.group(2)), properties.get(key) or {})
    if inner[end:].strip():
        raise XmlCallError(f"the call to {name} has text outside its <parameter> blocks")
    return name, arguments


def _unpadded(text: str) -> str:
    """The value without the newline the format puts after the opening tag and before the closing one."""
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


def _value(tool: str, key: str, text: str, schema: dict) -> Any:
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if "string" in kinds:
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        if kinds:
            raise XmlCallError(f"{key} of {tool} should be {' or '.join(kinds)}, not {text.strip()[:40]!r}") from None
        return text
    if kinds and not any(_is(value, kind) for kind in kinds):
        raise XmlCallError(f"{key} of {tool} should be {' or '.join(kinds)}, not {text.strip()[:40]!r}")
    return value if kinds or not isinstance(value, str) else text


def _is(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False  # JSON's true is no number, though Python's bool is an int
    expected = _JSON_TYPES.get(kind)
    return expected is not None and isinstance(value, expected)
