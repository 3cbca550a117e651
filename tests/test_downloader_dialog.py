"""The downloader dialog under pytest-qt, against the fake hub: search, pick, download, pause, cancel,
recent searches."""

import socket
import threading

import pytest
from PySide6.QtCore import Qt

from app.core import recent_searches
from app.dialogs.downloader import DownloaderDialog
from engine.models.library import ModelLibrary
from tests.hub_server import (
    QWEN_DRAFT_REPO,
    SMOL_REPO,
    fake_hub_fixture,  # noqa: F401  (the fake_hub fixture)
)

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
WAIT_MS = 20_000  # an upper bound for slow machines, not a performance claim


@pytest.fixture(autouse=True)
def data_folder(isolated_home):
    """Recent searches are kept in the data folder: each test gets a fresh one."""
    return isolated_home


@pytest.fixture
def library(tmp_path):
    return ModelLibrary(tmp_path / "models", tmp_path / "library.json", scan_external=False)


def open_dialog(qtbot, library, target=None) -> DownloaderDialog:
    dialog = DownloaderDialog(library=library, target=target)
    qtbot.addWidget(dialog)  # closed (which waits for its pool threads) at teardown
    dialog.show()
    return dialog


def search_and_pick(qtbot, dialog, text, repo_id):
    dialog.query.setText(text)
    qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: repo_id in repositories(dialog), timeout=WAIT_MS)
    dialog.results.selectRow(repositories(dialog).index(repo_id))
    qtbot.waitUntil(lambda: dialog.files_title.text() == f"Files in {repo_id}", timeout=WAIT_MS)


def repositories(dialog) -> list[str]:
    return [dialog.results.item(r, 0).text() for r in range(dialog.results.rowCount())]


def start_smol_download(qtbot, dialog):
    search_and_pick(qtbot, dialog, "smollm2", SMOL_REPO)
    dialog.files.selectRow(0)
    assert dialog.download_button.isEnabled()
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)


def downloading(dialog) -> bool:
    """Progress has been shown: the status reads '<file>: 10.5 MB of 98.4 MB · 250 MB/s · …'."""
    return f"{SMOL}: " in dialog.status.text() and " of 98.4 MB" in dialog.status.text()


def go_offline(monkeypatch) -> None:
    """Point the hub client at a port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", closed)


def run_search(qtbot, dialog, text):
    dialog.query.setText(text)
    qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)


def recent(dialog) -> list[str]:
    return [b.text() for b in dialog.recent_buttons] if dialog.recent_box.isVisible() else []


def stall(fake_hub, at: int) -> threading.Event:
    gate = threading.Event()
    fake_hub.hold_at[SMOL] = (at, gate)
    return gate


def test_search_lists_repositories_and_files_with_fit(qtbot, fake_hub, library):
    dialog = open_dialog(qtbot, library)
    search_and_pick(qtbot, dialog, "smollm2", SMOL_REPO)

    assert dialog.results.rowCount() == 2
    first = [dialog.results.item(0, c).text() for c in range(5)]
    assert first == [SMOL_REPO, "5,000", "40", "apache-2.0", "2025-02-01"]
    cells = [dialog.files.item(0, c).text() for c in range(4)]
    assert cells[:3] == ["Q4_1", SMOL, "98.4 MB"]
    assert cells[3] in ("fits", "tight", "won't fit")
    assert not dialog.banner.isVisible()


def test_before_the_first_search_the_most_downloaded_repositories_are_listed(qtbot, fake_hub, library):
    dialog = open_dialog(qtbot, library)
    qtbot.waitUntil(lambda: dialog.results.rowCount() > 0, timeout=WAIT_MS)
    assert dialog.results_title.text().startswith("Most downloaded GGUF repositories")
    downloads = [int(dialog.results.item(r, 1).text().replace(",", "")) for r in range(dialog.results.rowCount())]
    assert downloads == sorted(downloads, reverse=True) and SMOL_REPO in repositories(dialog)
    assert not dialog.banner.isVisible()


def test_download_shows_progress_and_cancel_deletes_the_part(qtbot, fake_hub, library):
    gate = stall(fake_hub, 10_000_000)
    dialog = open_dialog(qtbot, library)
    landed = []
    dialog.model_downloaded.connect(landed.append)
    start_smol_download(qtbot, dialog)

    qtbot.waitUntil(lambda: downloading(dialog), timeout=WAIT_MS)
    assert not dialog.download_button.isEnabled()
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()  # the transfer goes on; the download notices the cancel at its next bytes
    qtbot.waitUntil(lambda: "Cancelled" in dialog.status.text(), timeout=WAIT_MS)

    assert list(library.models_dir.iterdir()) == []
    assert landed == []
    assert dialog.progress.value() == 0
    assert not dialog.cancel_button.isEnabled()


def test_download_lands_and_is_announced(qtbot, fake_hub, library):
    dialog = open_dialog(qtbot, library)
    with qtbot.waitSignal(dialog.model_downloaded, timeout=WAIT_MS) as landed:
        start_smol_download(qtbot, dialog)
    path = landed.args[0]
    assert path == library.models_dir / SMOL
    assert path.stat().st_size == 98_362_432
    assert "verified" in dialog.status.text()
    assert dialog.progress.value() == dialog.progress.maximum()
    assert [e.path.name for e in library.scan()] == [SMOL]


def test_pause_then_resume_in_a_new_dialog(qtbot, fake_hub, library):
    gate = stall(fake_hub, 10_000_000)
    dialog = open_dialog(qtbot, library)
    start_smol_download(qtbot, dialog)
    qtbot.waitUntil(lambda: downloading(dialog), timeout=WAIT_MS)
    qtbot.mouseClick(dialog.pause_button, Qt.MouseButton.LeftButton)
    gate.set()
    qtbot.waitUntil(lambda: dialog.pause_button.text() == "Resume", timeout=WAIT_MS)
    assert "partial file is kept" in dialog.status.text()
    dialog.close()

    reopened = open_dialog(qtbot, library)  # as after an app restart: found from the files on disk
    assert "Unfinished download: " + SMOL in reopened.status.text()
    assert reopened.pause_button.text() == "Resume"
    kept = (library.models_dir / (SMOL + ".part")).stat().st_size
    with qtbot.waitSignal(reopened.model_downloaded, timeout=WAIT_MS):
        qtbot.mouseClick(reopened.pause_button, Qt.MouseButton.LeftButton)
    resumed = fake_hub.body_requests(SMOL)[-1]
    assert (resumed.start, resumed.sent) == (kept, 98_362_432 - kept)  # no byte fetched twice
    assert (library.models_dir / SMOL).stat().st_size == 98_362_432


def test_offline_hub_shows_a_clear_banner(qtbot, monkeypatch, library):
    go_offline(monkeypatch)
    dialog = open_dialog(qtbot, library)
    dialog.query.setText("qwen")
    qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(dialog.banner.isVisible, timeout=WAIT_MS)
    assert "The model hub could not be reached" in dialog.banner.text()
    assert dialog.results.rowCount() == 0
    assert "No results" not in dialog.results_title.text()  # the banner says why; nothing contradicts it
    assert dialog.search_button.isEnabled()  # one can try again


def test_draft_suggestions_and_vocabulary_check(qtbot, fake_hub, library, qwen_paths):
    target = library.add_file(qwen_paths[0])
    dialog = open_dialog(qtbot, library, target)
    qtbot.mouseClick(dialog.drafts_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.results.rowCount() > 0, timeout=WAIT_MS)
    assert repositories(dialog) == [QWEN_DRAFT_REPO]

    dialog.results.selectRow(0)
    qtbot.waitUntil(lambda: dialog.verdict.isVisible(), timeout=WAIT_MS)
    assert dialog.verdict.text().startswith("✓ Can draft for")

    search_and_pick(qtbot, dialog, "smollm2", SMOL_REPO)
    qtbot.waitUntil(lambda: dialog.verdict.text().startswith("✗"), timeout=WAIT_MS)
    assert "vocabulary sizes differ" in dialog.verdict.text()  # as llama.cpp says: no BOS is added by either
    # Only headers went over the wire for the checks, never a whole model.
    assert fake_hub.bytes_served(SMOL) < 8 << 20


def test_a_search_is_remembered_and_offered_again_in_a_new_dialog(qtbot, fake_hub, library):
    first = open_dialog(qtbot, library)
    assert recent(first) == []  # nothing searched yet: no row at all
    search_and_pick(qtbot, first, "smollm2", SMOL_REPO)
    first.close()

    reopened = open_dialog(qtbot, library)  # as after an app restart: read from the data folder
    assert recent(reopened) == ["smollm2"]
    qtbot.mouseClick(reopened.recent_buttons[0], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: SMOL_REPO in repositories(reopened), timeout=WAIT_MS)
    assert reopened.query.text() == "smollm2"
    assert reopened.results_title.text() == "2 repositories"
    assert not reopened.recent_box.isVisible()  # the results answer a search now


def test_recent_searches_are_newest_first_without_duplicates_and_at_most_eight(qtbot, fake_hub, library):
    dialog = open_dialog(qtbot, library)
    for n in range(9):
        run_search(qtbot, dialog, f"  query {n} ")
    run_search(qtbot, dialog, "QUERY 3")  # a search again, in another case, moves to the front
    run_search(qtbot, dialog, "   ")  # an empty search is not one to offer again
    qtbot.waitUntil(lambda: dialog.results_title.text() != "Searching for “”…", timeout=WAIT_MS)
    dialog.close()

    expected = ["QUERY 3", "query 8", "query 7", "query 6", "query 5", "query 4", "query 2", "query 1"]
    assert recent(open_dialog(qtbot, library)) == expected
    assert recent_searches.load() == expected


def test_clear_forgets_the_recent_searches(qtbot, fake_hub, library):
    recent_searches.remember("qwen")
    recent_searches.remember("gemma")
    dialog = open_dialog(qtbot, library)
    assert recent(dialog) == ["gemma", "qwen"]

    qtbot.mouseClick(dialog.clear_recent_button, Qt.MouseButton.LeftButton)
    assert recent(dialog) == []
    assert recent_searches.load() == []
    assert recent(open_dialog(qtbot, library)) == []


def test_recent_searches_work_offline_and_say_the_hub_is_unreachable(qtbot, monkeypatch, library):
    recent_searches.remember("qwen")
    go_offline(monkeypatch)
    dialog = open_dialog(qtbot, library)
    qtbot.waitUntil(dialog.banner.isVisible, timeout=WAIT_MS)  # the popular list could not be fetched
    assert recent(dialog) == ["qwen"]

    qtbot.mouseClick(dialog.recent_buttons[0], Qt.MouseButton.LeftButton)
    assert dialog.results_title.text() == "Searching for “qwen”…"
    qtbot.waitUntil(lambda: dialog.results_title.text() == "", timeout=WAIT_MS)
    assert "The model hub could not be reached" in dialog.banner.text()
    assert dialog.banner.isVisible()


def test_a_damaged_or_unwritable_recent_searches_file_is_no_error(tmp_path):
    path = tmp_path / "recent_searches.json"
    path.write_bytes(b'["qwen", "gem\xff')  # cut off mid-write by something other than write_json
    assert recent_searches.load(path) == []
    assert recent_searches.remember("llama", path) == ["llama"]  # a fresh list replaces it
    assert recent_searches.load(path) == ["llama"]

    path.write_text('{"searches": ["qwen"]}')
    assert recent_searches.load(path) == []
    path.write_text('["qwen", 3, null, "", "Qwen", "gemma"]')
    assert recent_searches.load(path) == ["qwen", "gemma"]

    blocked = tmp_path / "a file" / "recent_searches.json"  # its folder cannot be made
    (tmp_path / "a file").write_text("")
    assert recent_searches.remember("qwen", blocked) == ["qwen"]
    assert not blocked.exists()
