"""The typed records an answer streams: tokens, verification rounds, and one final event."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.config import TokenSource
from engine.decoding.stats import AnswerStats, Round
from engine.tools import MalformedToolCall, ToolCall


class FinishReason(str, Enum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens reached
    CONTEXT = "context"  # the context window is full
    CANCELLED = "cancelled"  # stopped by the user
    ERROR = "error"  # decode failed; DoneEvent.error says why
    TOOL_CALLS = "tool_calls"  # the answer ended having called tools (DoneEvent.tool_calls): run them, send results


@dataclass(frozen=True)
class TokenEvent:
    """One token of the answer. text is "" while a multi-byte character is still incomplete."""

    token: int
    text: str
    source: TokenSource
    reasoning: bool = False  # part of the model's thinking (engine/chat/reasoning.py), not its answer
    tool_call: bool = False  # part of a tool call's markup (its ToolCallEvent follows), not the answer's text


@dataclass(frozen=True)
class ToolCallEvent:
    """The model completed a call to one of the tools offered: after the TokenEvents of its markup."""

    call: ToolCall


@dataclass(frozen=True)
class MalformedToolCallEvent:
    """The model wrote something meant as a tool call that is not a valid one: its text and why."""

    malformed: MalformedToolCall


@dataclass(frozen=True)
class RoundEvent:
    """One verification round: what was drafted, by whom, how much the target kept, what it cost.

    It comes before the round's TokenEvents. apply_to() is the one place a round is added to an
    answer's statistics: the engine applies it to the final figures and the app to its live ones,
    so after the last round both are the same.
    """

    round: Round
    t_draft: float
    t_verify: float
    t_sample: float
    plain_s: float  # what plain decoding would have taken for this round's tokens (AnswerStats.plain_s)
    n_tokens: int  # tokens the round added to the answer (an end-of-generation token is not one)
    gen_s: float  # from the start of generation (after the prompt) to the end of this round
    # What a simulation prices (both are in t_draft): a model drafter's steps, the unsure one it did not take
    # included, and the context tokens the draft model evaluated first (a new prompt, a tool result).
    draft_steps: int = 0
    caught_up: int = 0
    context: int = 0  # tokens the round's batch attended to (a simulation prices the decode at that context)

    def apply_to(self, stats: AnswerStats) -> None:
        r = self.round
        stats.n_rounds += 1
        stats.n_drafted += r.drafted
        stats.n_accepted += r.accepted
        stats.rounds.append(r)
        if r.drafted:
            stats.accepted_hist[r.accepted] = stats.accepted_hist.get(r.accepted, 0) + 1
        stats.n_tokens += self.n_tokens
        stats.t_draft += self.t_draft
        stats.t_verify += self.t_verify
        stats.t_sample += self.t_sample
        stats.plain_estimate_s += self.plain_s
        stats.gen_s = self.gen_s


@dataclass(frozen=True)
class DoneEvent:
    finish_reason: FinishReason
    stats: AnswerStats
    text: str  # the whole answer as shown (without the thinking)
    error: str | None = None  # user-facing message when finish_reason is ERROR (or CONTEXT)
    reasoning: str = ""  # the model's thinking, when it thought aloud
    tool_calls: tuple[ToolCall, ...] = ()  # the calls the answer made, in order (text holds what it said besides)
    malformed_calls: tuple[MalformedToolCall, ...] = ()  # what it wrote as calls that are not valid ones


Event = TokenEvent | RoundEvent | DoneEvent | ToolCallEvent | MalformedToolCallEvent
