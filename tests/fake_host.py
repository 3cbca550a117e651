"""A fake EngineHost: the seam between the app's controllers and the engine thread, which we own.

It satisfies app.bridge.host.EngineHostApi, the Protocol the real EngineHost satisfies (tests check
both), records what the controllers ask, and lets a test emit the real EngineWorker's signals in any
order, as the engine thread would deliver them. Nothing is loaded and nothing decodes.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject

from app.bridge.worker import AnswerRequest, EngineWorker, RequestPurpose
from engine import AnswerStats, Calibration, DoneEvent, FinishReason
from engine.decoding.chat_engine import EngineInfo


class FakeEngineHost(QObject):
    """EngineHost's GUI-side surface. Its worker is a real EngineWorker that never runs: the
    test emits its signals (same names, same arguments), delivered directly on this thread."""

    def __init__(self):
        super().__init__()
        self.worker = EngineWorker()
        self.queue = None  # no local server here: nothing shares the line
        self.requests: list[AnswerRequest] = []
        self.stopped: list[int | None] = []
        self.loads: list[tuple] = []
        self.forgotten: list[int | None] = []
        self.jobs: list = []
        self.templates: list[str | None] = []
        self.starters = 0
        self.groundings: list[tuple] = []

    def answer(
        self, messages, sampling, spec, purpose=RequestPurpose.ANSWER, remember=None, collections=(), tools=()
    ) -> AnswerRequest:
        request = AnswerRequest(
            len(self.requests) + 1,
            list(messages),
            sampling,
            spec,
            RequestPurpose(purpose),
            threading.Event(),
            remember=remember,
            collections=tuple(collections),
            tools=tuple(tools),
        )
        self.requests.append(request)
        return request

    def stop(self, request_id: int | None = None) -> None:
        self.stopped.append(request_id)
        for request in self.requests:
            if request_id is None or request.id == request_id:
                request.cancel.set()

    def load(self, target, draft, chat_template=None) -> None:
        self.loads.append((target, draft, chat_template))

    def set_chat_template(self, chat_template: str | None) -> None:
        self.templates.append(chat_template)

    def count_tokens(self, messages, max_tokens: int, collections=(), tools=()) -> int:
        return 0  # never answered: the tests that need counts use the real engine

    def forget_history(self, conversation_id: int | None) -> None:
        self.forgotten.append(conversation_id)

    def ground_for_remote(self, messages, collections) -> int:
        self.groundings.append((list(messages), tuple(collections)))
        return 10_000 + len(self.groundings)  # never answered: the tests that need passages use the real engine

    def dispatch(self, job) -> None:
        self.jobs.append(job)

    def assemble_starter(self) -> None:
        self.starters += 1

    # What the engine thread would send back.
    def tokens(self, request: AnswerRequest, *texts: str, reasoning: bool = False) -> None:
        for text in texts:
            self.worker.token_received.emit(request.id, text, "target", 0, reasoning)

    def done(self, request: AnswerRequest, text: str, reason=FinishReason.STOP, gen_s: float = 1.0, error=None):
        stats = AnswerStats(n_tokens=max(len(text.split()), 1), gen_s=gen_s)
        self.worker.answer_finished.emit(request.id, DoneEvent(reason, stats, text, error))

    def loaded(self, target_name: str = "target", draft_name: str | None = None) -> None:
        """The last load asked for succeeded."""
        self.worker.loaded.emit(engine_info(target_name, draft_name))

    def load_failed(self, message: str = "The file is not a GGUF model.") -> None:
        self.worker.load_failed.emit(message)


def engine_info(target_name: str, draft_name: str | None = None) -> EngineInfo:
    """What a load of small models on the CPU reports (its calibration: a 10 ms target step)."""
    return EngineInfo(
        target_name=target_name,
        draft_name=draft_name,
        backend="CPU",
        target_gpu_layers=0,
        target_layers=24,
        draft_gpu_layers=0,
        n_ctx=2048,
        n_threads=2,
        memory_bytes=10**8,
        calibration=Calibration({1: 0.01}),
    )
