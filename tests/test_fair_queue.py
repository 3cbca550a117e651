"""The server's fair queue, without a model: first come first served, a waiting limit, cancellation."""

import threading

import pytest

from engine.serving.fair_queue import EngineThread, FairQueue, QueueFull


class HeldEngine:
    """A dispatch that runs jobs only when the test says, one at a time, in order."""

    def __init__(self):
        self.jobs = []

    def dispatch(self, fn):
        self.jobs.append(fn)

    def run_next(self):
        self.jobs.pop(0)()


def test_jobs_run_in_arrival_order_and_the_limit_counts_only_the_waiting():
    engine, ran = HeldEngine(), []
    queue = FairQueue(engine.dispatch, limit=2)
    a = queue.submit("a", lambda t: ran.append(t.label))
    b = queue.submit("b", lambda t: ran.append(t.label))
    with pytest.raises(QueueFull):
        queue.submit("c", lambda t: ran.append(t.label))
    app = queue.submit("app", lambda t: ran.append(t.label), limited=False)  # the app's chat is never refused
    assert [queue.ahead_of(t) for t in (a, b, app)] == [0, 1, 2] and queue.n_waiting == 3
    engine.run_next()
    assert ran == ["a"] and a.state == "done" and queue.ahead_of(b) == 0
    c = queue.submit("c", lambda t: ran.append(t.label))  # one place freed
    while engine.jobs:
        engine.run_next()
    assert ran == ["a", "b", "app", "c"] and c.queue_wait_s >= 0


def test_a_cancelled_waiting_job_frees_its_place_and_is_told_when_its_turn_comes():
    engine, seen = HeldEngine(), []
    queue = FairQueue(engine.dispatch, limit=1)
    waiting = queue.submit("gone", lambda t: seen.append(t.cancel.is_set()))
    waiting.cancel.set()  # the client left while it waited
    assert queue.n_waiting == 0 and waiting.state == "cancelled"
    queue.submit("next", lambda t: seen.append(t.cancel.is_set()))  # not refused: the place is free
    engine.run_next()
    engine.run_next()
    assert seen == [True, False]  # the job still runs, to close what it owes its caller


def test_cancel_all_stops_only_the_owners_jobs_and_a_failing_job_does_not_stop_the_line():
    engine, server = HeldEngine(), object()
    queue = FairQueue(engine.dispatch)
    mine = queue.submit("#1", lambda t: 1 / 0, owner=server)
    app = queue.submit("app", lambda t: None)
    queue.cancel_all(owner=server)
    assert mine.cancel.is_set() and not app.cancel.is_set()
    engine.run_next()  # raises inside: logged, the queue goes on
    engine.run_next()
    assert app.state == "done" and queue.running is None


def test_the_engine_thread_runs_jobs_in_order_and_ends():
    thread, ran, done = EngineThread(name="test-engine"), [], threading.Event()
    queue = FairQueue(thread.dispatch)
    for i in range(5):
        queue.submit(str(i), lambda t: ran.append(t.label))
    queue.submit("last", lambda t: done.set())
    assert done.wait(10) and ran == ["0", "1", "2", "3", "4"]
    assert thread.close()
