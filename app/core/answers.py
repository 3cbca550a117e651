"""One answer while it streams: its tokens, live statistics, and its writes to the store.

Qt-free on purpose. The window feeds it the worker's events and calls flush() a few times a
second; each flush is one small transaction, so a crash keeps what was on the screen, and the
message stays marked incomplete until finish() or fail().

A write that fails (a full disk, a database that became read-only) never interrupts the answer:
the recorder stops writing, keeps what it already wrote, tells on_write_error once, and the
answer goes on streaming to the screen.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict

from app.core.sources import Source, mark_cited
from app.core.store import Message, Store, Token
from engine import AnswerStats, DoneEvent, FinishReason, RoundEvent
from engine.config import SamplingParams, SpecParams, TokenSource

# What a store write raises when the disk is full or the file cannot be written.
STORE_WRITE_ERRORS = (sqlite3.Error, OSError)


def write_problem(error: BaseException, what: str) -> str:
    """A message for the user about a failed store write of `what`."""
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    full = code == 13 or getattr(error, "errno", None) == 28  # SQLITE_FULL, ENOSPC
    if full:
        return (
            f"Specula could not save {what}: the disk is full. What is on screen stays until you "
            "leave this chat; free some disk space to save again."
        )
    return f"Specula could not save {what}: the chat database cannot be written ({error})."


class AnswerRecorder:
    def __init__(
        self,
        store: Store,
        message: Message,
        request_id: int,
        target_step_s: float = 0.0,
        on_write_error: Callable[[str], None] | None = None,
    ):
        self.store = store
        self.on_write_error = on_write_error
        self.write_error: str | None = None  # set by the first failed write; nothing is written after it
        self.message = message
        self.request_id = request_id
        self.tokens: list[Token] = []
        self.text = ""
        self.reasoning = ""  # the model's thinking so far (not in self.tokens: those are the answer's)
        self.written = 0  # tokens already in the store
        self.stats = AnswerStats(target_step_s=target_step_s)
        self._sources: Counter = Counter()
        self._t_request = time.perf_counter()
        self._dirty = False
        self.finished = False

    # -- events from the worker -----------------------------------------------------------------

    def add_token(self, text: str, source: TokenSource | str, round_index: int, reasoning: bool = False) -> Token:
        token = Token(text, source, round_index)  # counted in stats.n_tokens by its round's event
        if reasoning:
            self.reasoning += text
            self.stats.n_reasoning_tokens += 1
            if text and not self.stats.ttft_s:
                self.stats.ttft_s = time.perf_counter() - self._t_request
            self._dirty = True
            return token
        if self.reasoning and not self.tokens:
            self.stats.reasoning_s = self.stats.gen_s  # the answer starts: thinking ended in this round
        self.tokens.append(token)
        self.text += text
        self._sources[source] += 1
        if text and not self.stats.ttft_s:
            self.stats.ttft_s = time.perf_counter() - self._t_request
        self._dirty = True
        return token

    def set_sources(self, sources: list[Source]) -> None:
        """The passages of the user's documents the answer was given (before its first token)."""
        self.message.sources = sources
        if not self.write_error:
            self._write(self.store.set_sources, self.message.id, sources)

    def add_round(self, event: RoundEvent) -> None:
        # The engine's own accounting, on the engine's clock: after the last round these live
        # figures (the estimated speedup included) equal the final ones.
        event.apply_to(self.stats)
        self._dirty = True

    def live_stats(self) -> AnswerStats:
        """The statistics so far (the engine's own arrive with the last event)."""
        self.stats.count_sources(self._sources)
        return self.stats

    # -- writing --------------------------------------------------------------------------------

    def flush(self) -> None:
        if not self._dirty or self.finished or self.write_error:
            return
        new = self.tokens[self.written :]
        if self._write(
            self.store.append_tokens, self.message.id, self.written, new, self.text, self.live_stats(), self.reasoning
        ):
            self.written = len(self.tokens)
            self._dirty = False

    def _write(self, write, *args) -> bool:
        """One store write; False (and on_write_error, once) when it failed."""
        try:
            write(*args)
            return True
        except STORE_WRITE_ERRORS as e:
            saved = f"this answer past its first {self.written} tokens" if self.written else "this answer"
            self.write_error = write_problem(e, saved)
            if self.on_write_error is not None:
                self.on_write_error(self.write_error)
            return False

    def finish(self, done: DoneEvent) -> Message:
        """The last event: write the engine's text and statistics and mark the message complete."""
        self.flush()
        stats = done.stats
        stats.backend = stats.backend or self.stats.backend
        # TOOL_CALLS with an error: a tool loop ended early (denied, timed out, its server lost, a call that
        # could not be read); LENGTH with one: the limit cut a call short.
        ended_early = (FinishReason.ERROR, FinishReason.CONTEXT, FinishReason.TOOL_CALLS, FinishReason.LENGTH)
        error = done.error if done.finish_reason in ended_early else None
        self.reasoning = done.reasoning or self.reasoning.strip()
        self._finish(done.text, done.finish_reason, stats, error)
        return self.message

    def fail(self, error: str) -> Message:
        """The worker failed without a DoneEvent: keep what was shown, with the error."""
        self.flush()
        self._finish(self.text, FinishReason.ERROR, self.live_stats() if self.tokens else None, error)
        return self.message

    def cancel(self) -> Message:
        """The app is closing mid-answer: keep what was shown, marked stopped."""
        self.flush()
        self._finish(self.text, FinishReason.CANCELLED, self.live_stats(), None)
        return self.message

    def _finish(self, text: str, reason: FinishReason, stats: AnswerStats | None, error: str | None) -> None:
        if self.finished:
            return
        if not self.write_error:
            self._write(self.store.finish_message, self.message.id, text, reason, stats, error, self.reasoning)
        if self.message.sources:
            mark_cited(self.message.sources, text)
            if not self.write_error:
                self._write(self.store.set_sources, self.message.id, self.message.sources)
        m = self.message
        m.content, m.finish_reason, m.error, m.complete = text, reason, error, True
        m.reasoning = self.reasoning
        m.stats = stats
        m.tokens = self.tokens
        self.text = text
        self.finished = True


def answer_params(
    sampling: SamplingParams, spec: SpecParams, system_prompt: str, target: str | None, draft: str | None
) -> dict:
    """What produced an answer, stored with it (compare-with-plain reruns from this)."""
    s = asdict(sampling)
    s["stop"] = list(s["stop"])
    return {
        "sampling": s,
        "spec": {"mode": spec.mode.value, "draft_length": spec.draft_length},
        "system_prompt": system_prompt,
        "target": target,
        "draft": draft,
    }


def sampling_from_params(params: dict) -> SamplingParams:
    values = dict(params.get("sampling", {}))
    values["stop"] = tuple(values.get("stop", ()))
    known = {k: v for k, v in values.items() if k in SamplingParams.__dataclass_fields__}
    return SamplingParams(**known)
