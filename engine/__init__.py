"""Specula's engine: local GGUF models, answered with speculative decoding. Never imports Qt.

The public API, by what a caller does:

- answer: `Engine` (load a target and a draft, stream answers), `EngineInfo` with its `Calibration`
  (what decoding costs on this machine), and what a stream yields: `TokenEvent`, `RoundEvent`,
  `DoneEvent`, `FinishReason`, `AnswerStats`;
- ask for it: `ModelSpec`, `SpecParams`, `SamplingParams`, `ChatMessage`, `DrafterMode`,
  `TokenSource`, `GPU_LAYERS_AUTO`, `GPU_LAYERS_ALL`;
- read a round: `Round` (in `AnswerStats.rounds` and `RoundEvent.round`), `DrafterKind`;
- offer tools: `ToolSpec` and `ToolChoice` to `Engine.chat(tools=..., tool_choice=...)`; the model's
  calls come back as `ToolCallEvent` (a `ToolCall`) or `MalformedToolCallEvent` (a
  `MalformedToolCall`), listed on the `DoneEvent` with `FinishReason.TOOL_CALLS`;
- fail clearly: `EngineError` and its kinds in `engine.errors`, where `user_message(error)` turns
  any exception into text for a person;
- manage models (no model loaded): `engine.models` (library, hub, download, starter);
- chat with another computer's OpenAI-compatible server: `engine.remote` (`RemoteServer`, its
  streamed records and `RemoteFigures`, the `RemoteError` kinds);
- the user's history index (drafts from earlier conversations): `Engine(history_dir=...)` opens it,
  `Engine.chat(remember=...)` adds to it; with no model loaded, `engine.history.store`
  (`forget_everywhere`, `erase_everywhere`, `disk_bytes`) and `engine.paths.history_dir()`.

Inside, in layers (pyproject.toml's import contracts hold them): the entry points `cli` and `bench`
use `decoding` (rounds of speculation) and `models`; `decoding` uses `llama` (llama.cpp, placement),
`chat` (prompt formats, text out) and `history` (the suffix index of earlier conversations); all of them use `gguf` (the file format), and at the bottom
`config`, `errors`, `paths`. `decoding` and `models` never import each other.

Names resolve on first use, so `import engine` loads neither llama.cpp nor numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and PyInstaller, which follow these; at run time __getattr__ does
    from engine.config import (
        GPU_LAYERS_ALL,
        GPU_LAYERS_AUTO,
        ChatMessage,
        DrafterKind,
        DrafterMode,
        ModelSpec,
        SamplingParams,
        SpecParams,
        TokenSource,
    )
    from engine.decoding.chat_engine import Engine, EngineInfo
    from engine.decoding.events import (
        DoneEvent,
        FinishReason,
        MalformedToolCallEvent,
        RoundEvent,
        TokenEvent,
        ToolCallEvent,
    )
    from engine.decoding.policy import Calibration
    from engine.decoding.stats import AnswerStats, Round
    from engine.errors import EngineError
    from engine.tools import MalformedToolCall, ToolCall, ToolChoice, ToolChoiceMode, ToolSpec

_PUBLIC = {
    "Engine": "engine.decoding.chat_engine",
    "EngineInfo": "engine.decoding.chat_engine",
    "Calibration": "engine.decoding.policy",
    "TokenEvent": "engine.decoding.events",
    "RoundEvent": "engine.decoding.events",
    "DoneEvent": "engine.decoding.events",
    "FinishReason": "engine.decoding.events",
    "AnswerStats": "engine.decoding.stats",
    "Round": "engine.decoding.stats",
    "ModelSpec": "engine.config",
    "SpecParams": "engine.config",
    "SamplingParams": "engine.config",
    "ChatMessage": "engine.config",
    "DrafterKind": "engine.config",
    "DrafterMode": "engine.config",
    "TokenSource": "engine.config",
    "GPU_LAYERS_AUTO": "engine.config",
    "GPU_LAYERS_ALL": "engine.config",
    "EngineError": "engine.errors",
    "ToolCallEvent": "engine.decoding.events",
    "MalformedToolCallEvent": "engine.decoding.events",
    "ToolSpec": "engine.tools",
    "ToolCall": "engine.tools",
    "MalformedToolCall": "engine.tools",
    "ToolChoice": "engine.tools",
    "ToolChoiceMode": "engine.tools",
}

__all__ = [
    "AnswerStats",
    "Calibration",
    "ChatMessage",
    "DoneEvent",
    "DrafterKind",
    "DrafterMode",
    "Engine",
    "EngineError",
    "EngineInfo",
    "FinishReason",
    "GPU_LAYERS_ALL",
    "GPU_LAYERS_AUTO",
    "MalformedToolCall",
    "MalformedToolCallEvent",
    "ModelSpec",
    "Round",
    "RoundEvent",
    "SamplingParams",
    "SpecParams",
    "TokenEvent",
    "TokenSource",
    "ToolCall",
    "ToolCallEvent",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolSpec",
]
assert sorted(__all__) == sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
