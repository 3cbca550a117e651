"""An embedding model from the downloader to the document library: the downloader lists embedding
models on request, a downloaded one becomes the library's meaning search when none was chosen (its
header read on the library's thread), a chat model goes the usual way, and the Documents window
opens the downloader on them. Against the fake hub serving real GGUF files."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers and tests.hub_server)

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.bridge.documents_service import DocumentsService
from app.dialogs.downloader import DownloaderDialog
from engine.models.library import ModelLibrary
from tests import embedding_fixture
from tests.app_helpers import make_window  # noqa: F401 (a fixture)
from tests.hub_server import SMOL_REPO, FakeFile, FakeHub, FakeRepo, standard_repos

WAIT_MS = 30_000  # bounds a hang on a slow machine; not a performance claim
EMBED_REPO = "second-state/All-MiniLM-L6-v2-Embedding-GGUF"
MINILM = "all-MiniLM-L6-v2-Q8_0.gguf"


@pytest.fixture
def hub(monkeypatch, smollm2_path, qwen_paths):
    target, draft = map(Path, qwen_paths)
    embed = FakeRepo(
        EMBED_REPO,
        [FakeFile(MINILM, embedding_fixture.minilm_gguf())],
        downloads=900,
        likes=9,
        license="apache-2.0",
        last_modified="2025-03-01T00:00:00.000Z",
    )
    with FakeHub([*standard_repos(Path(smollm2_path), target, draft), embed]) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield fake


def download(qtbot, dialog: DownloaderDialog, repo_id: str) -> Path:
    qtbot.waitUntil(lambda: repo_id in repositories(dialog), timeout=WAIT_MS)
    dialog.results.selectRow(repositories(dialog).index(repo_id))
    qtbot.waitUntil(lambda: dialog.files_title.text() == f"Files in {repo_id}", timeout=WAIT_MS)
    dialog.files.selectRow(0)
    with qtbot.waitSignal(dialog.model_downloaded, timeout=WAIT_MS) as landed:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    return Path(landed.args[0])


def repositories(dialog) -> list[str]:
    return [dialog.results.item(r, 0).text() for r in range(dialog.results.rowCount())]


def test_a_downloaded_embedding_model_becomes_the_librarys_and_a_chat_model_goes_its_way(
    qtbot, hub, isolated_home, tmp_path
):
    library = ModelLibrary(tmp_path / "models", tmp_path / "library.json", scan_external=False)
    dialog = DownloaderDialog(library=library)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.mouseClick(dialog.embedding_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.results_title.text().startswith("Embedding models"), timeout=WAIT_MS)
    assert repositories(dialog) == [EMBED_REPO]  # the chat models' repositories are not embedding models
    path = download(qtbot, dialog, EMBED_REPO)

    service = DocumentsService(isolated_home / "documents")
    try:
        with qtbot.waitSignal(service.embedding_model_downloaded, timeout=WAIT_MS) as adopted:
            service.consider_download(str(path))
        assert adopted.args == [str(path), True] and service.embedding_model() == str(path.resolve())
        with qtbot.waitSignal(service.embedding_model_downloaded, timeout=WAIT_MS) as again:
            service.consider_download(str(path))
        assert again.args[1] is False  # one was chosen already: the choice is the user's

        dialog.query.setText("smollm2")
        qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
        chat = download(qtbot, dialog, SMOL_REPO)
        with qtbot.waitSignal(service.other_model_downloaded, timeout=WAIT_MS) as other:
            service.consider_download(str(chat))
        assert other.args == [str(chat)] and service.embedding_model() == str(path.resolve())
        assert [e.path.name for e in library.scan()] == [chat.name]  # the embedding model is no chat model
        assert [p.name for p in library.embedding_models] == [MINILM]
    finally:
        assert service.shutdown(5.0)


def test_the_documents_window_opens_the_downloader_on_embedding_models(qtbot, hub, make_window):
    window = make_window(wait=False)
    window.open_documents()
    button = next(b for b in window.documents_dialog.findChildren(type(window.documents_dialog.no_model_button))
                  if b.text() == "Download one…")  # fmt: skip
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    downloader = window.findChild(DownloaderDialog)
    assert downloader is not None and downloader.isVisible()
    qtbot.waitUntil(lambda: downloader.results_title.text().startswith("Embedding models"), timeout=WAIT_MS)
    assert repositories(downloader) == [EMBED_REPO]
