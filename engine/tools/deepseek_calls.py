"""DeepSeek's tool-call blocks: `<｜tool▁calls▁begin｜>` … `<｜tool▁calls▁end｜>` around one or more calls.

Two forms of a call are in use, and a model's template shows which it writes (both are read):

- V3 and R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\\n```json\\n{"city": "Paris"}\\n```<｜tool▁call▁end｜>`
- V3.1 and later: `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>`
"""

from __future__ import annotations

import json
from typing import Any

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekCallError(ValueError):
    """A call block that is not one DeepSeek writes; the message says why."""


def parse_deepseek_calls(body: str) -> list[tuple[str, Any] | DeepSeekCallError]:
    """The calls between the block's markers, in order: (name, arguments as parsed JSON), or why one is not."""
    chunks = body.split(CALL_BEGIN)
    if chunks[0].strip():
        return [DeepSeekCallError("the block has text outside its calls")]
    calls = [_call(chunk) for chunk in chunks[1:]]
    return calls or [DeepSeekCallError("the block holds no call")]


def _call(chunk: str) -> tuple[str, Any] | DeepSeekCallError:
    chunk = chunk.strip()
    if chunk.endswith(CALL_END):
        chunk = chunk[: -len(CALL_END)]
    kind, sep, rest = chunk.partition(SEP)
    if not sep:
        return DeepSeekCallError("the call has no <｜tool▁sep｜> between its name and its arguments")
    if kind.strip() == "function":  # V3 and R1: the name on the first line, the arguments in a ```json fence
        name, _, rest = rest.partition("\n")
        rest = rest.strip().removeprefix("```json").removesuffix("```")
    else:
        name = kind
    try:
        return name.strip(), json.loads(rest)
    except json.JSONDecodeError as e:
        return DeepSeekCallError(f"the arguments of {name.strip() or 'the call'} are not valid JSON: {e}")
