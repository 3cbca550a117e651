"""Offer, once per load, to unload a draft model that auto never drafts with.

On a machine where drafting does not pay (a CPU, FACTS.md) auto decodes plainly, and the draft model
only holds memory. The engine's statistics per drafter (AnswerStats.by_drafter) say what each answer
drafted; after IDLE_ANSWERS answers in a row without a draft-model token, `idle` is emitted once. An answer
that calls tools comes in several passes (each ends in answer_finished): it counts once, when its last pass
ends, and as drafted if any of its passes drafted.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from engine import FinishReason
from engine.config import DrafterKind

IDLE_ANSWERS = 4


class DraftIdleWatch(QObject):
    idle = Signal(object)  # EngineInfo: its draft drafted nothing over the last IDLE_ANSWERS answers

    def __init__(self, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.info = None
        self.idle_answers = 0
        self.offered = False
        self.answer_drafted = False  # an earlier pass of the answer going on (it called tools) drafted
        worker.loaded.connect(self.watch)
        worker.answer_finished.connect(self._on_answer)

    @Slot(object)
    def watch(self, info) -> None:
        """A load (or the draft dropped): count afresh; offer again only for a new draft."""
        if self.info is None or info.draft_name != self.info.draft_name:
            self.offered = False
        self.info, self.idle_answers = info, 0

    @Slot(int, object)
    def _on_answer(self, _request_id: int, done) -> None:
        if self.info is None or self.info.draft_name is None or self.offered:
            return
        tally = done.stats.by_drafter().get(DrafterKind.DRAFT_MODEL)
        self.answer_drafted |= tally is not None and tally.drafted > 0
        if done.finish_reason == FinishReason.TOOL_CALLS:
            return  # a step of the answer: its tools run, then the answer goes on in another pass
        self.idle_answers = 0 if self.answer_drafted else self.idle_answers + 1
        self.answer_drafted = False
        if self.idle_answers >= IDLE_ANSWERS:
            self.offered = True
            self.idle.emit(self.info)
