"""Documents in the app, with real widgets, the real library thread and a real model: the Documents
window indexes a folder of real documents with progress and shows the files it could not read; a chat
that ticks a collection in its header is answered from it, with a Sources panel that is stored and
exported; the library's thread stops when the window closes."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.bridge.documents_service import DocumentsService
from app.chat.sources_panel import SourcesPanel
from app.core.chat_settings import ChatSettings
from app.core.export import to_json, to_markdown
from app.core.sources import Source, load_sources, mark_cited
from app.dialogs.documents_dialog import DocumentsDialog
from tests.app_helpers import ANSWER_TIMEOUT_MS, ask, make_window, smol_settings  # noqa: F401 (a fixture)
from tests.signal_log import SignalLog

LICENSES = Path("/usr/share/common-licenses")


@pytest.fixture
def licenses(tmp_path) -> Path:
    folder = tmp_path / "licenses"
    folder.mkdir()
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0"):
        shutil.copy(LICENSES / name, folder / name)
    return folder


def test_the_documents_window_indexes_a_folder_with_progress_and_lists_what_it_could_not_read(
    qtbot, isolated_home, licenses
):
    (licenses / "photo.txt").write_bytes(b"\x89PNG\0\0\0" + bytes(300))
    service = DocumentsService(isolated_home / "documents")
    dialog = DocumentsDialog(service)
    qtbot.addWidget(dialog)
    dialog.show()
    progress = []
    service.progress.connect(lambda name, p: progress.append((name, p.files_done, p.files_total)))
    indexed, summaries = SignalLog(service.indexed), SignalLog(service.summaries_ready)
    dialog.add_paths([str(licenses)])  # as a dropped folder: a collection named after it, then indexed
    [(name, report)] = indexed.wait(qtbot, 0)
    assert name == "licenses" and report.read == 3 and len(report.errors) == 1
    assert progress and progress[-1] == ("licenses", 4, 4)
    qtbot.waitUntil(lambda: dialog.collections.count() == 1 and dialog.errors.count() == 1)
    assert "3 files indexed" in dialog.figures.text()
    assert "binary file" in dialog.errors.item(0).text() and dialog.errors.isVisible()
    assert "up to date" in dialog.progress_label.text() and not dialog.progress.isVisible()
    assert dialog.sources.item(0).data(0x0100) == str(licenses)
    dialog.grab().save(str(isolated_home / "documents-window.png"))

    since = summaries.mark()
    service.remove_source("licenses", str(licenses))
    summaries.wait(qtbot, since, timeout_ms=30_000)
    qtbot.waitUntil(lambda: "0 files indexed" in dialog.figures.text())
    assert sorted(p.name for p in licenses.iterdir()) == ["Apache-2.0", "GPL-3", "MPL-2.0", "photo.txt"]
    assert service.shutdown(5.0)


def test_the_documents_window_sets_how_many_passages_go_before_a_question(qtbot, isolated_home, tmp_path):
    service = DocumentsService(tmp_path / "library")
    dialog = DocumentsDialog(service)
    qtbot.addWidget(dialog)
    assert dialog.passages_box.value() == 6
    dialog.passages_box.setValue(3)
    qtbot.waitUntil(lambda: service.passages_per_question() == 3, timeout=10_000)  # written by the library's thread
    again = DocumentsDialog(service)
    qtbot.addWidget(again)
    assert again.passages_box.value() == 3
    assert service.shutdown(5.0)


def test_a_new_collection_is_selected_so_the_folder_added_next_goes_into_it(
    qtbot, isolated_home, licenses, monkeypatch
):
    service = DocumentsService(isolated_home / "documents")
    dialog = DocumentsDialog(service)
    qtbot.addWidget(dialog)
    indexed = SignalLog(service.indexed)
    dialog.add_paths([str(licenses)])
    indexed.wait(qtbot, 0)
    qtbot.waitUntil(lambda: dialog.current_name() == "licenses")

    # The name the user types in the "New collection" box (Qt's own dialog, not what is tested here).
    monkeypatch.setattr("app.dialogs.documents_dialog.QInputDialog.getText", lambda *args: ("Home", True))
    dialog.new_collection()
    qtbot.waitUntil(lambda: dialog.collections.count() == 2)
    assert dialog.current_name() == "Home"
    notes = isolated_home / "notes"
    notes.mkdir()
    (notes / "plan.md").write_text("# Plan\n\nThe garden gets tomatoes in May.\n", "utf-8")
    since = indexed.mark()
    dialog.add_paths([str(notes)])
    [(name, report)] = indexed.wait(qtbot, since)
    assert name == "Home" and report.read == 1
    sources = {s.name: s.sources for s in dialog.summaries}
    assert sources == {"licenses": [str(licenses)], "Home": [str(notes)]}
    assert service.shutdown(5.0)


def test_a_chat_answers_from_its_collection_with_sources_shown_stored_and_exported(
    qtbot, make_window, smollm2_path, licenses, isolated_home
):
    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=24))
    indexed = SignalLog(window.documents.indexed)
    window.documents.add_collection("Licences")
    window.documents.add_sources("Licences", [str(licenses)])
    window.documents.update("Licences")
    indexed.wait(qtbot, 0)
    qtbot.waitUntil(lambda: "Licences" in [a.text() for a in window.composer.documents_button.menu().actions()])
    tick = next(a for a in window.composer.documents_button.menu().actions() if a.text() == "Licences")
    tick.trigger()  # as the user ticks it in the chat's header
    assert window.session.chat_settings.collections == ["Licences"]
    assert window.composer.documents_button.text() == "Documents: Licences"

    # The meter counts the passages sending would add, and says how many of its tokens they are.
    window.composer.set_text("What goes in the NOTICE text file of Derivative Works?")
    with qtbot.waitSignal(window.context.counted, timeout=60_000) as counted:
        window.context.count_now()
    count = counted.args[0]
    assert 200 < count.n_documents < count.n_tokens <= count.n_ctx - count.room
    assert f"({count.n_documents:,} from your documents)" in window.composer.meter.label.text()
    window.composer.set_text("")

    ask(qtbot, window, "What goes in the NOTICE text file of Derivative Works?")
    answer = window.session.messages[-1]
    assert answer.stats.n_prompt_tokens == count.n_tokens  # what the meter said is what the model read
    assert answer.error is None and answer.content and answer.stats.n_tokens > 0
    assert answer.sources and answer.sources[0].path.endswith("Apache-2.0")
    assert '"NOTICE" text file' in answer.sources[0].text
    widget = window.chat_view.message_widget(answer.id)
    panel = widget.sources_panel
    assert panel.isVisible() and len(panel.rows) == len(answer.sources)
    first = panel.row(1)
    assert f"[1] {answer.sources[0].where()}" in first.line.text() and not first.passage.isVisible()
    first.line.linkActivated.emit("show")  # as a click on the row: the passage itself shows under it
    assert first.open and '"NOTICE" text file' in first.passage.text()
    qtbot.waitUntil(first.passage.isVisible, timeout=5_000)  # shown once Qt has laid the row out again
    window.grab().save(str(isolated_home / "chat-with-sources.png"))

    stored = window.store.messages(window.session.conversation.id)[-1]
    assert [s.to_dict() for s in stored.sources] == [s.to_dict() for s in answer.sources]
    conversation = window.session.conversation
    assert [s["path"] for s in json.loads(to_json(conversation, [stored]))["messages"][0]["sources"]] == [
        s.path for s in stored.sources
    ]
    assert "<summary>Sources</summary>" in to_markdown(conversation, [stored])
    assert ChatSettings.from_dict(conversation.settings).collections == ["Licences"]


def test_a_library_indexed_in_the_terminal_is_searched_by_the_app_and_both_keep_working(
    qtbot, make_window, smollm2_path, licenses, isolated_home
):
    """The app's threads and the terminal each open the index (app restarted, `docs index` run while it is
    open): none takes the others' open index for a damaged one."""
    from engine.documents import indexer
    from engine.documents.library import Library
    from engine.paths import documents_dir

    terminal = Library(documents_dir())  # as `python -m engine docs add / index` left it
    terminal.add_collection("Licences")
    terminal.add_sources("Licences", [str(licenses)])
    indexer.update(terminal, "Licences")
    terminal.close()

    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=8))
    window.choose_collections(["Licences"])
    with qtbot.waitSignal(window.context.counted, timeout=60_000):
        window.context.count_now()  # the engine thread opens the index
    ask(qtbot, window, "What goes in the NOTICE text file of Derivative Works?")
    answer = window.session.messages[-1]
    assert answer.error is None and answer.sources and answer.sources[0].path.endswith("Apache-2.0")

    (licenses / "notes.txt").write_text("Notes kept beside the licences.\n")
    terminal = Library(documents_dir())  # `docs index` again while the app is open
    assert terminal.rebuilt == "" and indexer.update(terminal, "Licences").read == 1
    terminal.close()
    assert not list(documents_dir().glob("index.damaged-*"))
    assert not [n.text() for n in window.chat_view.notices if "damaged" in n.text()]


def test_an_index_found_damaged_at_launch_is_said_in_the_chat(
    qtbot, make_window, smollm2_path, licenses, isolated_home
):
    """Rebuilt by the documents thread as the window opens, before any Documents window exists to say so."""
    import os

    from engine.documents import indexer
    from engine.documents.library import Library
    from engine.paths import documents_dir

    library = Library(documents_dir())
    library.add_collection("Licences")
    library.add_sources("Licences", [str(licenses)])
    indexer.update(library, "Licences")
    library.close()
    index = documents_dir() / "index.sqlite3"
    data = bytearray(index.read_bytes())
    data[100:4096] = os.urandom(4096 - 100)  # the first page: a damaged database
    index.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(str(index) + suffix).unlink(missing_ok=True)

    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=8))

    def said():
        return [n for n in window.chat_view.notices if "damaged" in n.text()]

    qtbot.waitUntil(lambda: bool(said()), timeout=60_000)
    assert "Your documents: The document index was damaged" in said()[0].text() and list(
        documents_dir().glob("index.damaged-*")
    )
    qtbot.waitUntil(lambda: window.documents.names() == ["Licences"], timeout=60_000)


def test_a_folder_dropped_on_the_chat_becomes_a_collection_it_answers_from(
    qtbot, make_window, smollm2_path, licenses, isolated_home, tmp_path
):
    """Too big to attach: the folder is added to the documents (named after it), chosen for the chat and
    indexed; a file dropped with it is attached; the same folder dropped again is the same collection."""
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    note = tmp_path / "note.md"
    note.write_text("# A note\n\nAttached, not indexed.\n")
    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=8))
    indexed = []
    window.documents.indexed.connect(lambda name, report: indexed.append((name, report.read)))

    def drop(*paths: Path) -> None:
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
        event = QDropEvent(
            QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0)
        )
        window.composer.dropEvent(event)

    drop(licenses, note)
    assert [a.name for a in window.composer.attachments] == ["note.md"] and not window.composer.refusal.isVisible()
    assert window.session.chat_settings.collections == ["licenses"]
    (notice,) = [n for n in window.chat_view.notices if "“licenses”" in n.text()]
    assert notice.kind == "info"
    qtbot.waitUntil(lambda: indexed == [("licenses", 3)], timeout=60_000)
    assert window.documents.names() == ["licenses"]
    ask(qtbot, window, "What goes in the NOTICE text file of Derivative Works?")
    answer = window.session.messages[-1]
    assert answer.sources and answer.sources[0].path == str(licenses / "Apache-2.0")

    other = tmp_path / "elsewhere" / "licenses"  # another folder of the same name: a collection of its own
    other.mkdir(parents=True)
    drop(licenses, other)
    assert window.session.chat_settings.collections == ["licenses", "licenses (2)"]
    qtbot.waitUntil(lambda: len(indexed) == 3, timeout=60_000)
    assert window.documents.names() == ["licenses", "licenses (2)"] and indexed[1:] == [
        ("licenses", 0),
        ("licenses (2)", 0),
    ]


def test_without_collections_nothing_is_searched_and_no_panel_shows(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=8))
    ask(qtbot, window, "Say hello.")
    answer = window.session.messages[-1]
    assert answer.sources == [] and not window.chat_view.message_widget(answer.id).sources_panel.isVisible()


def test_stored_sources_read_back_forgivingly_and_citations_mark_them():
    sources = [Source(1, "c", "/a/notes.md", "x", "Intro", 3, 9), Source(2, "c", "/a/r.pdf", "y", page=2)]
    mark_cited(sources, "As [2] says.")
    assert [s.cited for s in sources] == [False, True]
    assert sources[0].where() == "notes.md, lines 3–9" and sources[1].where() == "r.pdf, page 2"
    data = [s.to_dict() for s in sources] + [{"n": "x"}, "junk", {"path": "/no/n"}]
    assert load_sources(data) == sources and load_sources("junk") == []


def test_the_sources_panel_counts_its_passages_in_words(qtbot):
    panel = SourcesPanel([Source(1, "c", "/a/notes.md", "x", "Intro", 3, 9)])
    qtbot.addWidget(panel)
    assert "a passage of your documents" in panel.title.text()
    panel.set_sources([Source(1, "c", "/a/notes.md", "x", "Intro", 3, 9, cited=True), Source(2, "c", "/a/r.pdf", "y")])
    assert "2 passages of your documents, 1 cited" in panel.title.text()


def test_meaning_search_in_the_app_an_embedding_model_chosen_checked_and_used(
    qtbot, make_window, smollm2_path, licenses, monkeypatch
):
    """The Documents window refuses a chat model as the embedding model, takes MiniLM, embeds the
    collection after indexing it (with progress), and the engine thread searches with it; a reranking
    that fails leaves the passages in the search's order and says so."""
    from engine.documents import vectors
    from engine.documents.embeddings import model_key
    from engine.documents.library import Library
    from engine.errors import DecodeError
    from tests import embedding_fixture

    window = make_window(smol_settings(smollm2_path, temperature=0.0, max_tokens=8))
    window.open_documents()
    dialog, service = window.documents_dialog, window.documents
    # The library's signals come from its own thread: waited for by what they leave (tests/signal_log.py).
    failures, indexed = [], []
    service.failed.connect(failures.append)
    service.indexed.connect(lambda name, report: indexed.append(name))
    service.set_embedding_model(smollm2_path)  # a chat model: refused, said why
    qtbot.waitUntil(lambda: bool(failures), timeout=30_000)
    assert "chat" in failures[0].lower() and service.embedding_model() == ""
    service.set_embedding_model(str(embedding_fixture.minilm_gguf()))
    qtbot.waitUntil(lambda: "meaning" in dialog.embedding_label.text(), timeout=30_000)
    service.set_reranking_model(str(embedding_fixture.minilm_gguf()))  # an embedding model cannot rerank
    qtbot.waitUntil(lambda: len(failures) == 2, timeout=30_000)
    assert "is an embedding model" in failures[1] and service.reranking_model() == ""
    service.set_reranking_model(smollm2_path)  # a small chat model can
    qtbot.waitUntil(lambda: "reordered by" in dialog.reranking_label.text(), timeout=30_000)

    embedded = []
    service.vector_progress.connect(lambda name, p: embedded.append((p.done, p.total)))
    dialog.add_paths([str(licenses)])
    qtbot.waitUntil(lambda: "licenses" in indexed, timeout=180_000)
    assert embedded and embedded[-1][0] == embedded[-1][1] > 40
    library = Library(service.root)
    _, passages, _ = library.counts("licenses")
    assert vectors.counts(library, "licenses", model_key(library.embedding_model())) == passages
    library.close()

    window.choose_collections(["licenses"])
    window.composer.set_text("Which licence lets me keep my changes private when I only use the program?")
    with qtbot.waitSignal(window.context.counted, timeout=60_000) as counted:
        window.context.count_now()
    assert counted.args[0].n_documents > 0
    assert window.host.worker.reranking_model.model is None  # the meter's count searches without reranking
    window.composer.set_text("")
    said = []
    window.answers.status_message.connect(said.append)  # the status bar, while the answer waits for its passages
    ask(qtbot, window, "Which licence lets me keep my changes private when I only use the program?")
    answer = window.session.messages[-1]
    assert answer.sources and answer.error is None and answer.content
    reordering = [text for text in said if text.startswith("Reordering the passages found")]
    assert said[0] == "Searching your documents…" and said[-1] == ""  # cleared once the search is done
    assert reordering[0].endswith(": 0 of 12…") and reordering[-1].endswith(": 11 of 12…")
    worker = window.host.worker  # both models loaded on the engine thread, kept for the next question
    assert worker.embedding_model.model is not None and worker.reranking_model.model is not None

    def decode_fails(context, continuation):  # a decode error while scoring (a GPU out of memory, say)
        raise DecodeError("llama_decode failed (code -3) at position 0.")

    monkeypatch.setattr(worker.reranking_model.model.scorer, "mean_logprob", decode_fails)
    ask(qtbot, window, "Which licence lets me keep my changes private when I only use the program?")
    answer = window.session.messages[-1]
    assert answer.sources and answer.error is None and answer.content  # answered from the search's order
    assert any("reranking failed" in n.text() for n in window.chat_view.notices)
