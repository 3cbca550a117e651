"""One answer while it streams: its tokens, live statistics, and its writes to the store.

Qt-free on purpose. The window feeds it the worker's events and calls flush() a few times a
second; each flush is one small transaction, so a crash keeps what was on the screen, and the
message stays marked incomplete until finish() or fail().
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict

from app.store import Message, Store, Token
from engine.config import SamplingParams, SpecParams
from engine.events import DoneEvent, FinishReason, RoundEvent
from engine.metrics import AnswerStats

FLUSH_S = 0.25


class AnswerRecorder:
    def __init__(self, store: Store, message: Message, request_id: int, target_step_s: float = 0.0):
        self.store = store
        self.message = message
        self.request_id = request_id
        self.tokens: list[Token] = []
        self.text = ""
        self.written = 0  # tokens already in the store
        self.stats = AnswerStats(target_step_s=target_step_s)
        self._sources: Counter = Counter()
        self._t_request = time.perf_counter()
        self._t_gen: float | None = None
        self._dirty = False
        self.finished = False

    # -- events from the worker -----------------------------------------------------------------

    def add_token(self, text: str, source: str, round_index: int) -> Token:
        token = Token(text, source, round_index)
        self.tokens.append(token)
        self.text += text
        self.stats.n_tokens += 1
        self._sources[source] += 1
        if text and not self.stats.ttft_s:
            self.stats.ttft_s = time.perf_counter() - self._t_request
        self._dirty = True
        return token

    def add_round(self, event: RoundEvent) -> None:
        if self._t_gen is None:
            # The first round started when its drafting did.
            self._t_gen = time.perf_counter() - (event.t_draft + event.t_verify + event.t_sample)
        s = self.stats
        s.record_round(event.drafter, event.draft_length, event.n_drafted, event.n_accepted)
        s.t_draft += event.t_draft
        s.t_verify += event.t_verify
        s.t_sample += event.t_sample
        self._dirty = True

    def live_stats(self) -> AnswerStats:
        """The statistics so far (the engine's own arrive with the last event)."""
        if self._t_gen is not None:
            self.stats.gen_s = time.perf_counter() - self._t_gen
        self.stats.count_sources(self._sources)
        return self.stats

    # -- writing --------------------------------------------------------------------------------

    def flush(self) -> None:
        if not self._dirty or self.finished:
            return
        new = self.tokens[self.written :]
        self.store.append_tokens(self.message.id, self.written, new, self.text, self.live_stats())
        self.written = len(self.tokens)
        self._dirty = False

    def finish(self, done: DoneEvent) -> Message:
        """The last event: write the engine's text and statistics and mark the message complete."""
        self.flush()
        stats = done.stats
        stats.backend = stats.backend or self.stats.backend
        error = done.error if done.finish_reason in (FinishReason.ERROR, FinishReason.CONTEXT) else None
        self._finish(done.text, done.finish_reason.value, stats, error)
        return self.message

    def fail(self, error: str) -> Message:
        """The worker failed without a DoneEvent: keep what was shown, with the error."""
        self.flush()
        self._finish(self.text, FinishReason.ERROR.value, self.live_stats() if self.tokens else None, error)
        return self.message

    def cancel(self) -> Message:
        """The app is closing mid-answer: keep what was shown, marked stopped."""
        self.flush()
        self._finish(self.text, FinishReason.CANCELLED.value, self.live_stats(), None)
        return self.message

    def _finish(self, text: str, reason: str, stats: AnswerStats | None, error: str | None) -> None:
        if self.finished:
            return
        self.store.finish_message(self.message.id, text, reason, stats, error)
        m = self.message
        m.content, m.finish_reason, m.error, m.complete = text, reason, error, True
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
