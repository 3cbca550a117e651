"""Closing never hangs: mid-load, mid-assembly and mid-download the window closes at once, leaving nothing half-done.

Each test holds the real work at a known point (inside llama.cpp's load progress callback, between
two chunks of the assembly, in a network read the fake hub stalls) so the close is sure to land
while it runs; the hold lasts until the close asks the work to stop, so a close that did not
cancel it would wait out its whole bound and leave the thread running (the assertions say so).
"""
# ruff: noqa: F811  (pytest fixtures imported from other test modules)

import hashlib
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.bridge.worker import running_threads
from app.core.settings import Settings
from engine.models import starter
from tests.app_helpers import LOAD_TIMEOUT_MS, make_window, smol_settings  # noqa: F401 (a fixture)
from tests.hub_server import SMOL_REPO, fake_hub_fixture  # noqa: F401 (the fake_hub fixture)
from tests.test_starter import write_part_packages

HOLD_S = 30  # how long the held work waits for the close to cancel it: only a hang would reach it
DIRECT = Qt.ConnectionType.DirectConnection  # runs on the engine thread, inside the work itself


def record(*signals) -> list:
    seen = []
    for signal in signals:
        signal.connect(lambda *args: seen.append(args), DIRECT)
    return seen


def failures(worker) -> list:
    """Every failure the worker reports, whatever the operation."""
    return record(worker.load_failed, worker.draft_refused, worker.answer_failed, worker.starter_failed)


def test_closing_while_the_model_loads_cancels_the_load(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path), wait=False)
    worker = window.host.worker
    inside_load = threading.Event()

    def hold(stage: str, _fraction: float) -> None:
        # Called from llama.cpp's progress callback, in the middle of loading the tensors.
        if stage == "Loading target" and not inside_load.is_set():
            inside_load.set()
            window.host.load_cancel.wait(HOLD_S)

    progress = record(worker.load_progress)
    worker.load_progress.connect(hold, DIRECT)
    cancelled, failed, loaded = record(worker.cancelled), failures(worker), record(worker.loaded)
    qtbot.waitUntil(inside_load.is_set, timeout=LOAD_TIMEOUT_MS)

    window.close()

    assert not window.host.stuck and running_threads() == []  # the thread ended within the bounded wait
    assert cancelled == [("load",)] and failed == [] and loaded == []  # abandoned, reported as cancelled
    assert worker.engine is None
    # llama.cpp stopped reading tensors where the callback said so: the target never reached 100%.
    assert {stage for stage, _ in progress} == {"Loading target"} and progress[-1][1] < 1.0


@pytest.fixture
def starter_parts(tmp_path, monkeypatch, smollm2_path):
    """The starter pair faked from SmolLM2 (as tests/test_starter.py does): three part packages."""
    data = Path(smollm2_path).read_bytes()
    write_part_packages(tmp_path / "site", data, "specula_close_part")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    digest = hashlib.sha256(data).hexdigest()
    pair = tuple(
        starter.StarterModel(name, role, "specula_close_part", 3, len(data), digest)
        for name, role in (("target.gguf", "target"), ("draft.gguf", "draft"))
    )
    monkeypatch.setattr(starter, "STARTER_PAIR", pair)
    return pair


def test_closing_while_the_starter_pair_is_assembled_leaves_no_partial_file(
    qtbot, make_window, starter_parts, isolated_home
):
    window = make_window(Settings(), wait=False)
    worker = window.host.worker
    mid_file = threading.Event()

    def hold(done: int, _total: int) -> None:
        # Called between two chunks: the first file is half written.
        if done >= starter.CHUNK * 2 and not mid_file.is_set():
            mid_file.set()
            window.host.starter_cancel.wait(HOLD_S)

    worker.starter_progress.connect(hold, DIRECT)
    cancelled, failed, finished = record(worker.cancelled), failures(worker), record(worker.starter_finished)
    window.assemble_starter()
    qtbot.waitUntil(mid_file.is_set, timeout=LOAD_TIMEOUT_MS)
    models = starter.models_dir()
    assert [p.name for p in models.iterdir()] == ["target.gguf.assembling"]  # really half-way

    window.close()

    assert not window.host.stuck and running_threads() == []
    assert cancelled == [("starter",)] and failed == [] and finished == []
    assert list(models.iterdir()) == []  # the partial file is gone; the next start assembles afresh


def test_closing_the_window_pauses_a_stalled_download_and_keeps_it_resumable(
    qtbot, make_window, smollm2_path, fake_hub
):
    from app.dialogs.downloader import DownloaderDialog
    from tests.test_downloader_dialog import SMOL, downloading, search_and_pick, stall

    window = make_window(smol_settings(smollm2_path))
    gate = stall(fake_hub, 10_000_000)  # the hub sends 10 MB, then nothing until the gate opens
    window.open_downloader()
    (dialog,) = window.findChildren(DownloaderDialog)
    search_and_pick(qtbot, dialog, "smollm2", SMOL_REPO)
    dialog.files.selectRow(0)
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: downloading(dialog), timeout=LOAD_TIMEOUT_MS)
    part = dialog.dest_dir / (SMOL + ".part")
    # Everything the hub sent is on disk: the download now waits in a read that gets no answer.
    qtbot.waitUntil(lambda: part.is_file() and part.stat().st_size >= 10_000_000, timeout=LOAD_TIMEOUT_MS)

    window.close()  # the download's thread is blocked in a read the hub will not answer

    try:
        assert dialog.tasks.active() == 0  # its thread ended: the stalled read was interrupted, not waited out
        assert not gate.is_set()
        assert part.stat().st_size == 10_000_000  # every byte received is kept
        assert (part.parent / (SMOL + ".download.json")).is_file()  # resumable at the next start
        assert not (part.parent / SMOL).exists()
    finally:
        gate.set()


def test_a_close_that_cannot_interrupt_native_work_gives_up_waiting_and_says_so(qtbot, smollm2_path, caplog):
    from app.bridge.worker import EngineHost
    from engine.config import ModelSpec

    host = EngineHost()
    stuck_inside = threading.Event()
    release = threading.Event()

    def ignore_the_cancel(stage: str, _fraction: float) -> None:
        # Stands for a native call that does not look at its cancel flag for a while.
        if not stuck_inside.is_set():
            stuck_inside.set()
            release.wait(HOLD_S)

    host.worker.load_progress.connect(ignore_the_cancel, DIRECT)
    host.load(ModelSpec(smollm2_path, n_ctx=512), None)
    qtbot.waitUntil(stuck_inside.is_set, timeout=LOAD_TIMEOUT_MS)
    try:
        assert host.shutdown(wait_s=0.2) is False and host.stuck  # bounded: it returns, and says why
        assert "did not stop within" in caplog.text
    finally:
        release.set()  # the work ends by itself and, cancelled, frees what it loaded
        assert host.thread.wait(HOLD_S * 1000)
    assert host.worker.engine is None
