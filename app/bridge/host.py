"""What the app's controllers ask of the engine thread: EngineHost's GUI-side surface, as a Protocol.

The real one is app.bridge.worker.EngineHost; tests drive the controllers and the session with a
fake that satisfies the same Protocol (tests/fake_host.py), so the two cannot drift apart unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from app.bridge.worker import RequestPurpose

if TYPE_CHECKING:
    from app.bridge.worker import AnswerRequest, EngineWorker
    from engine.config import ChatMessage, ModelSpec, SamplingParams, SpecParams
    from engine.serving.fair_queue import FairQueue


@runtime_checkable
class EngineHostApi(Protocol):
    worker: EngineWorker  # its signals: what the engine thread reports (queued onto the GUI thread)
    queue: FairQueue  # the one line answers wait in (shared with the local server while it runs)

    def load(self, target: ModelSpec | None, draft: ModelSpec | None, chat_template: str | None = None) -> None: ...

    def set_chat_template(self, chat_template: str | None) -> None: ...

    def answer(
        self,
        messages: list[ChatMessage],
        sampling: SamplingParams,
        spec: SpecParams,
        purpose: RequestPurpose = RequestPurpose.ANSWER,
        remember: int | None = None,
        collections: tuple[str, ...] = (),
        tools: tuple = (),
    ) -> AnswerRequest: ...

    def stop(self, request_id: int | None = None) -> None: ...

    def count_tokens(
        self, messages: list[ChatMessage], max_tokens: int, collections: tuple[str, ...] = (), tools: tuple = ()
    ) -> int: ...

    def forget_history(self, conversation_id: int | None) -> None: ...

    def ground_for_remote(self, messages: list[ChatMessage], collections: tuple[str, ...]) -> int: ...

    def dispatch(self, job: Callable[[], object]) -> None: ...

    def assemble_starter(self) -> None: ...
