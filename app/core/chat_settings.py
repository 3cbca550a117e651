"""What one conversation chooses for itself: a system prompt (perhaps from a preset), its models, sampling.

A conversation stores only what it changed (ChatSettings.to_dict(), in the store's
conversations.settings column); everything else follows the app's Settings, so changing a
default later still reaches the chats that never chose otherwise. applied_to() makes the
Settings an answer in that chat is written with. Reading is forgiving like Settings.load: a
value of the wrong type is dropped and a number is clamped to the range the dialogs allow.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field

from app.core.remote_engines import is_remote, parse_remote_ref
from app.core.settings import RANGES, Settings

# The sampling settings a chat may set for itself, with the words the dialog uses.
SAMPLING_FIELDS: dict[str, str] = {
    "temperature": "Temperature",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "min_p": "Min-p",
    "max_tokens": "Max tokens",
    "seed": "Seed",
}
INTEGER_FIELDS = {"top_k", "max_tokens", "seed"}


@dataclass
class ChatSettings:
    preset: str = ""  # the preset the system prompt came from ("": none, or edited since)
    system_prompt: str | None = None  # None: the app's system prompt
    target: str = ""  # a model file chosen in this chat, or a remote model's reference ("": the app's default)
    draft: str = ""  # the draft chosen with it ("": none); used only with target
    sampling: dict[str, float] = field(default_factory=dict)  # SAMPLING_FIELDS this chat sets
    collections: list[str] = field(default_factory=list)  # document collections its answers draw on (engine.documents)
    mcp_servers: list[str] = field(default_factory=list)  # MCP servers (mcp.json names) whose tools it offers
    allowed_tools: list[str] = field(default_factory=list)  # "server/tool" it may call without asking (tool_key)
    # Remote engines (their ids) the user allowed this chat to send its documents' passages to: none by
    # default, so a chat answered remotely is asked without them unless the user said otherwise.
    documents_to: list[str] = field(default_factory=list)

    @property
    def is_default(self) -> bool:
        return self.to_dict() == {}

    def applied_to(self, settings: Settings, exists=None) -> Settings:
        """A copy of settings with this chat's choices in it (a model that is gone is not used).
        exists: whether a model path is there (default: a file on disk, or an engine in the settings)."""
        exists = exists or (lambda path: model_available(path, settings))
        result = copy.deepcopy(settings)
        if self.system_prompt is not None:
            result.system_prompt = self.system_prompt
        if self.target and exists(self.target):
            result.target.path = self.target
            result.draft.path = self.draft if self.draft and exists(self.draft) and not is_remote(self.target) else ""
        for name, value in self.sampling.items():
            setattr(result, name, value)
        return result

    def missing_model(self, settings: Settings | None = None, exists=None) -> str:
        """The model this chat chose, if it is no longer there (a file deleted, a remote engine removed
        from settings; "" otherwise)."""
        exists = exists or (lambda path: model_available(path, settings) if settings else os.path.isfile(path))
        return self.target if self.target and not exists(self.target) else ""

    def summary(self, presets: dict[str, str]) -> list[str]:
        """What this chat sets, in words (the header button's tooltip)."""
        lines = []
        if self.system_prompt is not None:
            if self.preset and presets.get(self.preset) == self.system_prompt:
                lines.append(f"Preset: {self.preset}")
            else:
                lines.append("Its own system prompt")
        if self.target:
            remote = parse_remote_ref(self.target)
            lines.append(f"Model: {remote[1]} (remote)" if remote else "Model: " + os.path.basename(self.target))
        for name, value in self.sampling.items():
            lines.append(f"{SAMPLING_FIELDS[name]}: {format_value(name, value)}")
        if self.collections:
            lines.append("Documents: " + ", ".join(self.collections))
        if self.mcp_servers:
            lines.append("Tools from: " + ", ".join(self.mcp_servers))
        if self.allowed_tools:
            lines.append("Always allowed: " + ", ".join(self.allowed_tools))
        if self.documents_to:
            lines.append("Passages from the documents sent to its remote engine")
        return lines

    # -- persistence --------------------------------------------------------------------------

    def to_dict(self) -> dict:
        data: dict = {}
        if self.preset:
            data["preset"] = self.preset
        if self.system_prompt is not None:
            data["system_prompt"] = self.system_prompt
        if self.target:
            data["target"], data["draft"] = self.target, self.draft
        if self.sampling:
            data["sampling"] = dict(self.sampling)
        if self.collections:
            data["collections"] = list(self.collections)
        if self.mcp_servers:
            data["mcp_servers"] = list(self.mcp_servers)
        if self.allowed_tools:
            data["allowed_tools"] = list(self.allowed_tools)
        if self.documents_to:
            data["documents_to"] = list(self.documents_to)
        return data

    @classmethod
    def from_dict(cls, data) -> ChatSettings:
        """A conversation's stored choices; what cannot be used is left at the app's default."""
        if not isinstance(data, dict):
            return cls()
        chat = cls()
        if isinstance(data.get("preset"), str):
            chat.preset = data["preset"]
        if isinstance(data.get("system_prompt"), str):
            chat.system_prompt = data["system_prompt"]
        if isinstance(data.get("target"), str):
            chat.target = data["target"]
            chat.draft = data["draft"] if isinstance(data.get("draft"), str) else ""
        sampling = data.get("sampling")
        for name, value in sampling.items() if isinstance(sampling, dict) else ():
            if name in SAMPLING_FIELDS and (number := _number(name, value)) is not None:
                chat.sampling[name] = number
        collections = data.get("collections")
        if isinstance(collections, list):
            chat.collections = list(dict.fromkeys(c for c in collections if isinstance(c, str) and c))
        chat.mcp_servers = _names(data.get("mcp_servers"))
        chat.allowed_tools = _names(data.get("allowed_tools"))
        chat.documents_to = _names(data.get("documents_to"))
        return chat


def _names(value) -> list[str]:
    """A stored list of names, without duplicates or what is not a name."""
    return list(dict.fromkeys(v for v in value if isinstance(v, str) and v)) if isinstance(value, list) else []


def model_available(path: str, settings: Settings) -> bool:
    """A model file on disk, or a model of a remote engine the settings still have."""
    remote = parse_remote_ref(path)
    if remote is None:
        return os.path.isfile(path)
    return settings.remote_engine(remote[0]) is not None


def _number(name: str, value) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if name in INTEGER_FIELDS:
        if value != int(value):
            return None
        value = int(value)
    low, high = RANGES[name]
    return type(value)(min(max(value, low), high))


def format_value(name: str, value) -> str:
    if name == "seed" and value < 0:
        return "random"
    return str(int(value)) if name in INTEGER_FIELDS else f"{value:g}"
