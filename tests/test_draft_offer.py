"""The offer to unload an idle draft model counts answers as the user sees them: an answer that calls tools
comes from several passes of the engine, and counts once."""

from types import SimpleNamespace

from PySide6.QtCore import QObject, Signal

from app.bridge.draft_offer import IDLE_ANSWERS, DraftIdleWatch
from engine.config import DrafterKind
from engine.decoding.events import DoneEvent, FinishReason
from engine.decoding.stats import AnswerStats, Round


class FakeWorker(QObject):
    """The two signals of the engine worker the watch listens to (app.bridge.worker.EngineWorker)."""

    loaded = Signal(object)
    answer_finished = Signal(int, object)


def finished(worker: FakeWorker, drafted: bool, calls_tools: bool = False) -> None:
    stats = AnswerStats()
    stats.rounds.append(Round(DrafterKind.DRAFT_MODEL if drafted else DrafterKind.NONE, 4, 4 if drafted else 0, 1))
    reason = FinishReason.TOOL_CALLS if calls_tools else FinishReason.STOP
    worker.answer_finished.emit(1, DoneEvent(reason, stats, ""))


def watching(qtbot):
    worker = FakeWorker()
    watch = DraftIdleWatch(worker)
    offers = []
    watch.idle.connect(offers.append)
    worker.loaded.emit(SimpleNamespace(draft_name="D"))  # the EngineInfo field the watch reads
    return worker, watch, offers


def test_the_offer_comes_after_idle_answers_not_idle_passes(qtbot):
    worker, watch, offers = watching(qtbot)
    for _ in range(IDLE_ANSWERS - 1):
        for _ in range(3):  # two passes that call a tool, then the one that answers
            finished(worker, drafted=False, calls_tools=True)
        finished(worker, drafted=False)
    assert watch.idle_answers == IDLE_ANSWERS - 1 and offers == []
    finished(worker, drafted=False)
    assert len(offers) == 1


def test_an_answer_counts_as_drafted_if_any_of_its_passes_drafted(qtbot):
    worker, watch, offers = watching(qtbot)
    for _ in range(IDLE_ANSWERS - 1):
        finished(worker, drafted=False)
    finished(worker, drafted=True, calls_tools=True)  # the answer's first pass drafted with the model
    finished(worker, drafted=False)
    assert watch.idle_answers == 0 and offers == []
