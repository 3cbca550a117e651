"""One answer that may call tools: where its loop stands (model, approval, tool), and what it did so far.

AnswerController drives it: each pass of the model that ends with calls queues them here; each call is
approved (or always allowed), run through McpService, and recorded as a ToolUse; when the pass's calls are
all answered, the model is asked again with the results. No Qt, no waiting: it is state and small steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from app.core.tool_steps import ToolStatus, ToolUse, replay, tool_key
from engine import ChatMessage, DoneEvent, FinishReason, SamplingParams, SpecParams, ToolCall
from engine.mcp.config import DEFAULT_TIMEOUT_S

MAX_STEPS = 8  # passes of the model that may call tools in one answer; the next calls are not run
TOOL_TIMEOUT_S = float(DEFAULT_TIMEOUT_S)  # one call, unless mcp.json's "timeout" says; Stop ends it sooner


class Waiting(str, Enum):
    SERVERS = "servers"  # its servers are starting
    MODEL = "model"  # a pass of the model runs
    APPROVAL = "approval"  # the user is asked about `current`
    TOOL = "tool"  # `current` runs


@dataclass
class ApprovalRequest:
    """What the window asks the user about: a call, its server and full arguments."""

    conversation_id: int
    message_id: int
    use: ToolUse


@dataclass
class ToolTurn:
    conversation_id: int
    servers: tuple[str, ...]
    allowed: set[str]  # tool_key()s this chat calls without asking
    chat: list[ChatMessage]  # the conversation before this answer
    sampling: SamplingParams
    spec: SpecParams
    remember: int | None
    collections: tuple[str, ...]
    waiting: Waiting = Waiting.SERVERS
    text: str = ""  # what the model said in the passes before this one
    step: int = 0
    uses: list[ToolUse] = field(default_factory=list)
    queue: list[ToolUse] = field(default_factory=list)  # this pass's calls not yet run
    current: ToolUse | None = None
    call_key: int | None = None  # McpService's key of the call running
    tool_server: dict[str, str] = field(default_factory=dict)  # tool name -> server, of what was offered
    stats: object = None  # AnswerStats of the passes so far, added up (AnswerStats.then)

    def messages(self) -> list[ChatMessage]:
        """What the next pass is asked: the conversation, then this answer so far with its calls' results."""
        return self.chat + (replay(self.text, self.uses) if self.uses else [])

    def add_calls(self, text: str, calls: tuple[ToolCall, ...]) -> list[ToolUse]:
        """A pass ended with calls: record them after the text it said, queued to run in order."""
        self.text = joined(self.text, text)
        new = [
            ToolUse(c.id, c.name, dict(c.arguments), self.tool_server.get(c.name, ""), self.step, len(self.text))
            for c in calls
        ]
        self.uses += new
        self.queue = list(new)
        return new

    def next_call(self) -> ToolUse | None:
        self.current = self.queue.pop(0) if self.queue else None
        return self.current

    def needs_approval(self, use: ToolUse) -> bool:
        return tool_key(use.server, use.name) not in self.allowed

    def end_unrun(self, status: ToolStatus, why: str) -> None:
        """The turn ends: the calls not yet answered say why they were not run."""
        for use in self.uses:
            if use.status == ToolStatus.PENDING:
                use.status, use.error = status, why
        self.queue, self.current, self.call_key = [], None, None


def joined(before: str, after: str) -> str:
    """Two passes' texts as one answer: a paragraph between them, so neither runs into the other."""
    if before and after and not before.endswith("\n"):
        return before + "\n\n" + after.lstrip()
    return before + after


def unread_calls_note(done: DoneEvent) -> str:
    """What to tell the user about calls the pass wrote that could not be read (those were not run), or ""."""
    if not done.malformed_calls:
        return ""
    if done.finish_reason == FinishReason.LENGTH:
        return (
            "The answer reached its Max tokens in the middle of a tool call, so the call was not run. "
            "Raise Max tokens in Settings (Ctrl+,) and regenerate."
        )
    bad = done.malformed_calls[0]
    more = f" (and {len(done.malformed_calls) - 1} more)" if len(done.malformed_calls) > 1 else ""
    others = " (its other calls were)" if done.tool_calls else ""
    return f"The model wrote a tool call that could not be read{more}, so it was not run{others}: {bad.reason}."
