"""The typed records an answer streams: tokens, verification rounds, and one final event."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.config import TokenSource
from engine.decoding.stats import AnswerStats


class FinishReason(str, Enum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens reached
    CONTEXT = "context"  # the context window is full
    CANCELLED = "cancelled"  # stopped by the user
    ERROR = "error"  # decode failed; DoneEvent.error says why


@dataclass(frozen=True)
class TokenEvent:
    """One token of the answer. text is "" while a multi-byte character is still incomplete."""

    token: int
    text: str
    source: TokenSource
    reasoning: bool = False  # part of the model's thinking (engine/chat/reasoning.py), not its answer


@dataclass(frozen=True)
class RoundEvent:
    """One verification round: what was drafted, by whom, and how much the target kept."""

    drafter: str  # "none", "draft", "lookup"
    draft_length: int  # k asked of the drafter this round
    n_drafted: int  # tokens the drafter actually proposed (may stop early)
    n_accepted: int
    t_draft: float
    t_verify: float
    t_sample: float
    plain_step_s: float = 0.0  # one plain step priced from this round's verification (AnswerStats.plain_s)


@dataclass(frozen=True)
class DoneEvent:
    finish_reason: FinishReason
    stats: AnswerStats
    text: str  # the whole answer as shown (without the thinking)
    error: str | None = None  # user-facing message when finish_reason is ERROR (or CONTEXT)
    reasoning: str = ""  # the model's thinking, when it thought aloud


Event = TokenEvent | RoundEvent | DoneEvent
