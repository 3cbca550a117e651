"""What a remote chat stream yields: text as it comes, then one record of the whole answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.remote.figures import RemoteFigures

CANCELLED = "cancelled"  # RemoteDone.finish_reason when Stop ended the stream


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of the model's thinking (`reasoning_content`, or vLLM's `reasoning`)."""

    text: str


@dataclass(frozen=True)
class RemoteUsage:
    """OpenAI's usage, as the server counted it; cached_tokens None when it did not say."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None


@dataclass(frozen=True)
class RemoteDone:
    """The end of an answer: everything streamed, why it ended, and its figures.

    finish_reason: the server's ("stop", "length", or another it names), or CANCELLED when Stop
    ended the stream (text is then what arrived before). model: the name the server answered with.
    extras: every field the chunks carried beside OpenAI's, later chunks winning (for Details).
    """

    text: str
    reasoning: str
    finish_reason: str
    figures: RemoteFigures
    usage: RemoteUsage | None = None
    model: str = ""
    extras: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def cancelled(self) -> bool:
        return self.finish_reason == CANCELLED


RemoteEvent = TextDelta | ReasoningDelta | RemoteDone
