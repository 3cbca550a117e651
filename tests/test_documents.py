"""The document library (engine/documents) on real files: real documents nobody here wrote (the
licence texts every Debian system carries), structure-following passages, incremental and resumable
indexing (a kill -9 in a subprocess), changes and deletions picked up, bad inputs, a damaged index,
a full disk, pause and cancel, BM25 search, and the terminal commands."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.documents import chunks, indexer, readers, retrieval
from engine.documents.library import Library, LibraryError
from tests.pdf_files import make_pdf

LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files: real, long, structured documents


@pytest.fixture
def licenses(tmp_path) -> Path:
    folder = tmp_path / "licenses"
    folder.mkdir()
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0", "BSD"):
        assert (LICENSES / name).is_file(), f"{LICENSES / name} is part of Debian's base-files"
        shutil.copy(LICENSES / name, folder / name)
    return folder


@pytest.fixture
def library(tmp_path):
    lib = Library(tmp_path / "library")
    yield lib
    lib.close()


def collection_of(library: Library, *paths: Path, name: str = "docs") -> str:
    library.add_collection(name)
    library.add_sources(name, list(paths))
    return name


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_real_documents_are_indexed_searched_and_located_exactly(library, licenses):
    before = fingerprint(licenses)
    name = collection_of(library, licenses)
    report = indexer.update(library, name)
    assert report.read == 4 and not report.errors
    files, passages, unreadable = library.counts(name)
    assert files == 4 and passages > 40 and unreadable == 0

    hits = retrieval.search(library, [name], "What goes in the NOTICE text file of a Derivative Work?")
    assert hits and hits[0].path.endswith("Apache-2.0") and '"NOTICE" text file' in hits[0].text
    # Each passage says where it is, exactly: its lines in the file, in order.
    for hit in hits:
        lines = Path(hit.path).read_text().splitlines()
        first = hit.text.split("\n", 1)[0]
        assert lines[hit.line_start - 1].strip() == first.strip()
        assert hit.text.rstrip().endswith(lines[hit.line_end - 1].strip())
        assert hit.where().startswith(Path(hit.path).name + ", line")
    assert fingerprint(licenses) == before  # the user's files are never written to


def test_passages_follow_headings_paragraphs_code_blocks_and_pages(tmp_path):
    md = tmp_path / "guide.md"
    code = "\n".join(f"    print({i})" for i in range(30))
    md.write_text(
        "# Install\n\nIntro paragraph.\n\n## Linux\n\nRun the installer.\n\n```python\ndef main():\n"
        f"{code}\n```\n\n## Windows\n\nDouble-click it.\n\n# Use\n\nType a question.\n"
    )
    found = chunks.passages(readers.read(md))
    by_heading = {p.heading: p for p in found}
    assert list(by_heading) == ["Install", "Install › Linux", "Install › Windows", "Use"]
    linux = by_heading["Install › Linux"]
    assert "Run the installer." in linux.text and "def main():" in linux.text and "print(29)" in linux.text
    assert linux.line_start == 7 and linux.line_end == 41
    assert by_heading["Use"].text == "Type a question." and by_heading["Use"].line_start == by_heading["Use"].line_end

    rst = tmp_path / "notes.rst"
    rst.write_text("Title\n=====\n\nFirst.\n\nSection\n-------\n\nSecond.\n\nAnother\n=======\n\nThird.\n")
    assert [(p.heading, p.text) for p in chunks.passages(readers.read(rst))] == [
        ("Title", "First."),
        ("Title › Section", "Second."),
        ("Another", "Third."),
    ]

    page = tmp_path / "page.html"
    page.write_text(
        "<html><head><title>x</title><script>var secret = 1;</script></head><body><h1>Guide</h1>"
        "<p>Hello <b>world</b> &amp; friends.</p><h2>Code</h2><pre>a  =  1\nb = 2</pre></body></html>"
    )
    html_passages = chunks.passages(readers.read(page))
    assert [p.heading for p in html_passages] == ["Guide", "Guide › Code"]
    assert html_passages[0].text == "Hello world & friends." and "a  =  1\nb = 2" in html_passages[1].text
    assert not any("secret" in p.text for p in html_passages)

    pdf = tmp_path / "report.pdf"
    make_pdf(pdf, "Widgets rose by 42 percent", "Gadgets fell by 7 percent")
    pdf_passages = chunks.passages(readers.read(pdf))
    assert [(p.page, p.text) for p in pdf_passages] == [
        (1, "Widgets rose by 42 percent"),
        (2, "Gadgets fell by 7 percent"),
    ]


def test_no_passage_is_larger_than_the_limit_even_from_one_huge_line(tmp_path):
    text = tmp_path / "dump.txt"
    text.write_text("short line\n" + "x" * 5000 + "\n" + "\n".join(f"line {i}" for i in range(800)) + "\n")
    found = chunks.passages(readers.read(text))
    assert all(len(p.text) <= chunks.MAX_CHARS for p in found)
    assert sum(p.text.count("x") for p in found) == 5000
    assert found[-1].line_end == 802


def test_only_what_changed_is_read_again_and_deleted_files_leave(library, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(5):
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\nThe code word of note {i} is word{i}.\n")
    name = collection_of(library, folder)
    assert indexer.update(library, name).read == 5

    again = indexer.update(library, name)
    assert (again.read, again.unchanged, again.dropped) == (0, 5, 0)

    touched = folder / "note1.md"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    assert indexer.update(library, name).read == 0  # saved again, same content: not read

    (folder / "note2.md").write_text("# Note 2\n\nNow it says zebra.\n")
    (folder / "note3.md").unlink()
    (folder / "sub").mkdir()
    (folder / "sub" / "new.txt").write_text("A new file about quokkas.\n")
    report = indexer.update(library, name)
    assert (report.read, report.dropped) == (2, 1)
    assert [h.path for h in retrieval.search(library, [name], "zebra")] == [str(folder / "note2.md")]
    assert retrieval.search(library, [name], "word2") == []
    assert retrieval.search(library, [name], "word3") == []
    assert retrieval.search(library, [name], "quokkas")[0].path.endswith("new.txt")

    library.remove_source(name, str(folder))
    assert library.counts(name) == (0, 0, 0)


KILL_AFTER = """
import os, signal, sys
from pathlib import Path
from engine.documents import indexer
from engine.documents.library import Library

library = Library(Path(sys.argv[1]))
stop_after = int(sys.argv[2])

def progress(p):
    if p.files_done == stop_after:
        os.kill(os.getpid(), signal.SIGKILL)  # as a crash or a killed app would: no cleanup at all

indexer.update(library, "docs", progress)
"""


def test_an_index_killed_mid_way_resumes_with_nothing_done_twice_and_nothing_lost(tmp_path, licenses):
    for i in range(12):
        (licenses / f"extra{i}.txt").write_text(f"Extra document {i} mentions aardvark{i}.\n" * 50)
    root = tmp_path / "library"
    library = Library(root)
    collection_of(library, licenses)
    library.close()

    run = subprocess.run([sys.executable, "-c", KILL_AFTER, str(root), "7"], cwd=Path(__file__).parents[1])
    assert run.returncode == -9

    library = Library(root)
    assert library.counts("docs")[0] == 7  # what was stored before the kill is whole and kept
    report = indexer.update(library, "docs")
    assert (report.read, report.unchanged) == (16 - 7, 7)
    assert library.counts("docs")[0] == 16
    assert all(retrieval.search(library, ["docs"], f"aardvark{i}") for i in range(12))
    library.close()


def test_bad_files_get_a_reason_each_and_the_rest_is_indexed(library, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nA readable note about otters.\n")
    (folder / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)) * 4)
    (folder / "damaged.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2000))
    make_pdf(folder / "locked.pdf", "Secret plans", password="hunter2")
    with open(folder / "huge.log", "wb") as f:  # sparse: 21 MB on paper, nothing on disk
        f.truncate(readers.MAX_TEXT_BYTES + 2**20)
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff" + bytes(100))  # not a document: passed over, not reported
    (folder / "minutes.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500))  # a document it cannot read
    (folder / "letter.rtf").write_text("{\\rtf1\\ansi Dear otters,\\par}")
    (folder / "loop").symlink_to(folder)  # a link back to its own folder must not trap the walk
    (folder / "gone.md").symlink_to(folder / "nowhere.md")

    name = collection_of(library, folder)
    before = fingerprint(folder)
    report = indexer.update(library, name)
    assert fingerprint(folder) == before  # bad files are read, never written (nor repaired)
    reasons = dict(report.errors)
    assert report.read == 1 and set(reasons) == {
        str(folder / n) for n in ("binary.txt", "damaged.pdf", "locked.pdf", "huge.log", "minutes.doc", "letter.rtf")
    }
    assert "old Word document: save a copy as .docx" in reasons[str(folder / "minutes.doc")]
    assert "rich text (RTF)" in reasons[str(folder / "letter.rtf")]
    assert "binary file" in reasons[str(folder / "binary.txt")]
    assert "not a readable PDF" in reasons[str(folder / "damaged.pdf")]
    assert "encrypted" in reasons[str(folder / "locked.pdf")]
    assert "larger than" in reasons[str(folder / "huge.log")]
    assert library.errors(name) == sorted(report.errors)
    assert retrieval.search(library, [name], "otters")[0].path == str(folder / "good.md")
    # Unchanged bad files are not read again; one that is fixed is.
    assert indexer.update(library, name).read == 0
    (folder / "binary.txt").write_text("Now plain text about beavers.\n")
    assert indexer.update(library, name).read == 1 and library.counts(name) == (2, 2, 5)


def test_a_file_that_vanishes_or_changes_while_indexing_is_handled(library, tmp_path):
    folder = tmp_path / "moving"
    folder.mkdir()
    for i in range(4):
        (folder / f"f{i}.txt").write_text(f"file {i} says hello{i}\n")
    name = collection_of(library, folder)

    def meddle(p: indexer.Progress):
        if p.files_done == 1:
            (folder / "f3.txt").unlink()  # gone before its turn

    report = indexer.update(library, name, meddle)
    assert report.read == 3 and not report.errors
    assert retrieval.search(library, [name], "hello3") == []
    assert len(retrieval.search(library, [name], "hello1")) == 1


def test_a_file_changed_while_it_is_read_is_read_again_at_the_next_update(library, tmp_path, monkeypatch):
    folder = tmp_path / "live"
    folder.mkdir()
    log = folder / "log.md"
    log.write_text("# Log\n\nFirst entry about herons.\n")
    name = collection_of(library, folder)
    read = readers.read

    def read_while_written(path, size=None):  # the user saves the file while the indexer reads it
        document = read(path, size)
        log.write_text("# Log\n\nFirst entry about herons.\n\nSecond entry about kingfishers.\n")
        return document

    monkeypatch.setattr(readers, "read", read_while_written)
    assert indexer.update(library, name).read == 1
    monkeypatch.undo()
    assert retrieval.search(library, [name], "kingfishers") == []  # what was read is kept for now
    again = indexer.update(library, name)
    assert again.read == 1 and retrieval.search(library, [name], "kingfishers")[0].path == str(log)
    assert indexer.update(library, name).read == 0  # and then it is settled


def test_a_missing_source_folder_keeps_what_was_indexed_from_it(library, tmp_path, licenses):
    name = collection_of(library, licenses)
    indexer.update(library, name)
    moved = licenses.rename(tmp_path / "unplugged")
    report = indexer.update(library, name)
    assert report.missing_sources == [str(licenses)] and report.dropped == 0
    assert "not found" in report.errors[0][1]
    assert library.counts(name)[0] == 4
    assert library.errors(name) == report.errors  # in the collection's list until it is back
    moved.rename(licenses)
    assert indexer.update(library, name).unchanged == 4
    assert library.errors(name) == []


def test_what_cannot_be_opened_keeps_its_passages_is_listed_and_is_tried_again(library, tmp_path, monkeypatch):
    folder = tmp_path / "share"
    (folder / "team").mkdir(parents=True)
    (folder / "team" / "plan.md").write_text("# Plan\n\nThe beavers build the dam in May.\n")
    (folder / "notes.md").write_text("# Notes\n\nOtters sleep holding hands.\n")
    team, notes = str(folder / "team"), str(folder / "notes.md")

    # Access taken away, as on a share whose rights changed. Injected where the OS answers: these tests may
    # run as root, whom chmod does not stop.
    def refusing(real):
        def opener(path=".", *args, **kwargs):
            if os.fspath(path) in (team, notes):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path, *args, **kwargs)

        return opener

    monkeypatch.setattr(indexer, "open", refusing(open), raising=False)
    name = collection_of(library, folder)
    first = indexer.update(library, name)
    assert first.read == 1 and dict(library.errors(name)).keys() == {notes}  # plan.md read, notes.md refused

    monkeypatch.undo()  # notes.md can be opened again: not changed, but tried again, and read
    monkeypatch.setattr(os, "scandir", refusing(os.scandir))  # and now the folder team cannot
    second = indexer.update(library, name)
    assert second.read == 1 and second.dropped == 0
    assert [path for path, _ in library.errors(name)] == [team] and "cannot be opened" in library.errors(name)[0][1]
    assert retrieval.search(library, [name], "beavers")[0].path == str(folder / "team" / "plan.md")  # kept
    assert retrieval.search(library, [name], "otters")[0].path == notes

    monkeypatch.undo()
    third = indexer.update(library, name)
    assert library.errors(name) == [] and third.read == 0 and library.counts(name) == (2, 2, 0)


def test_a_damaged_index_is_set_aside_and_built_again(tmp_path, licenses):
    root = tmp_path / "library"
    library = Library(root)
    collection_of(library, licenses)
    indexer.update(library, "docs")
    library.close()
    data = bytearray((root / "index.sqlite3").read_bytes())
    data[100:4096] = os.urandom(4096 - 100)  # the header's tail and the first page: a damaged database
    (root / "index.sqlite3").write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(str(root / "index.sqlite3") + suffix).unlink(missing_ok=True)

    library = Library(root)
    assert "damaged" in library.rebuilt and len(list(root.glob("index.damaged-*.sqlite3"))) == 1
    assert [c.name for c in library.collections()] == ["docs"]  # the user's collections are not in the index
    assert indexer.update(library, "docs").read == 4
    library.close()


def test_a_second_connection_opens_beside_the_first_and_both_go_on(tmp_path, licenses):
    """The app's threads, the terminal and the server each open the index: none may take another's
    open index for damage (a lock left by opening once did, and the index was set aside)."""
    root = tmp_path / "library"
    first = Library(root)
    name = collection_of(first, licenses)
    indexer.update(first, name)
    second = Library(root)  # the first still open, as the app's indexer is while a search opens
    assert second.rebuilt == "" and not list(root.glob("index.damaged-*"))
    assert second.counts(name) == first.counts(name) and first.counts(name)[0] == 4
    (licenses / "notes.txt").write_text("A fifth file, indexed while the second connection is open.\n")
    assert indexer.update(first, name).read == 1  # the first can still write
    assert second.counts(name)[0] == 5
    first.close(), second.close()


def test_an_index_busy_in_another_program_is_said_and_never_set_aside(tmp_path, monkeypatch):
    from engine.documents import library as library_module

    root = tmp_path / "library"
    root.mkdir()
    writer = sqlite3.connect(root / "index.sqlite3")  # a new index, being written by someone else
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE other (x)")
    monkeypatch.setattr(library_module, "BUSY_TIMEOUT_S", 0.2)
    with pytest.raises(LibraryError, match="cannot be opened now: database is locked"):
        Library(root)
    assert not list(root.glob("index.damaged-*"))  # a busy index is not damaged
    writer.rollback()
    writer.close()
    library = Library(root)  # free again: it opens, and the tables are made
    assert library.rebuilt == "" and library.counts("docs") == (0, 0, 0)
    library.close()


def test_a_full_disk_stops_indexing_with_a_message_and_keeps_what_was_stored(library, licenses):
    name = collection_of(library, licenses)
    pages = library.db.execute("PRAGMA page_count").fetchone()[0]
    library.db.execute(f"PRAGMA max_page_count = {pages + 30}")  # SQLite's own 'database or disk is full'
    with pytest.raises(LibraryError, match="could not be written.*full.*kept"):
        indexer.update(library, name)
    stored = library.counts(name)[0]
    assert stored < 4
    library.db.execute("PRAGMA max_page_count = 1073741823")
    assert indexer.update(library, name).read == 4 - stored


def test_indexing_can_be_paused_and_cancelled(library, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(10):
        (folder / f"n{i}.txt").write_text(f"note {i}\n")
    name = collection_of(library, folder)
    controls = indexer.Controls()
    paused_at = threading.Event()

    def on_progress(p: indexer.Progress):
        if p.files_done == 2:
            controls.pause()
            paused_at.set()

    worker = threading.Thread(
        target=lambda: setattr(worker, "report", indexer.update(library, name, on_progress, controls))
    )
    worker.start()
    assert paused_at.wait(10)
    worker.join(0.5)
    assert worker.is_alive()  # paused, not finished
    controls.cancel()
    worker.join(10)
    assert worker.report.cancelled and worker.report.read == 2


def test_questions_are_searched_as_words_whatever_they_contain(library, licenses):
    name = collection_of(library, licenses)
    indexer.update(library, name)
    for question in ('"unbalanced', "NEAR(warranty", "a AND OR NOT -*", "warranty's ^ {col}: x", "the of and"):
        retrieval.search(library, [name], question)  # no FTS5 syntax error reaches the user
    assert retrieval.search(library, [name], "") == []
    assert retrieval.fts_query('say "hi" OR bye') == '"say" OR "hi" OR "bye"'
    # A message with a long file attached: its last words (the question typed after the file) are searched.
    attached = " ".join(f"word{i}" for i in range(5000)) + " What does the NOTICE file hold?"
    query = retrieval.fts_query(attached)
    assert query.count(" OR ") == retrieval.MAX_QUERY_WORDS - 1 and query.endswith('"notice" OR "file" OR "hold"')


def test_the_terminal_commands_add_index_search_and_list(tmp_path, licenses):
    def docs(*args: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "engine", "docs", "--dir", str(tmp_path / "lib"), *args],
            capture_output=True, text=True, cwd=Path(__file__).parents[1], timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        return run.stdout

    make_pdf(licenses / "locked.pdf", "Secret terms.", password="s3cret")
    assert "licenses: 1 folder or file;" in docs("add", "licenses", str(licenses))
    assert "read 4" in docs("index", "licenses")
    found = docs("search", "licenses", "Mozilla Public License larger work")
    assert found.startswith("[1] MPL-2.0, lines ")
    listed = docs("list")
    assert "licenses: 4 files" in listed and "1 unreadable" in listed
    assert f"  ! {licenses / 'locked.pdf'}: encrypted; save an unprotected copy to add it." in listed
    with sqlite3.connect(tmp_path / "lib" / "index.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert docs("passages") == "Up to 6 passages before each question, as many as fit the context.\n"
    assert docs("passages", "3").startswith("Up to 3 passages") and docs("passages").startswith("Up to 3 ")
    from engine.documents.library import passages_per_question, read_definitions

    assert passages_per_question(read_definitions(tmp_path / "lib")) == 3  # what the app and the server read too


def test_a_question_is_grounded_in_the_passages_that_fit_and_citations_are_read_back(library, licenses):
    from engine.documents import grounding

    name = collection_of(library, licenses)
    indexer.update(library, name)
    hits = retrieval.search(library, [name], "NOTICE text file of Derivative Works", limit=4)
    everything = grounding.ground("What goes in NOTICE?", hits, fits=lambda text: True)
    assert everything.sources == hits and everything.message.endswith("Question: What goes in NOTICE?")
    assert everything.message.index("[1] Apache-2.0, lines") < everything.message.index("[2] ")
    # whole passages, their prose reflowed (tests/test_reflow.py): lookup drafts a quote of them
    assert grounding.prompt_text(hits[0]).strip() in everything.message
    assert hits[0].text.split() == grounding.prompt_text(hits[0]).split()

    room = len(everything.message) - len(hits[-1].text) - 20
    fewer = grounding.ground("What goes in NOTICE?", hits, fits=lambda text: len(text) <= room)
    assert 0 < len(fewer.sources) < len(hits) and len(fewer.message) <= room
    nothing = grounding.ground("What goes in NOTICE?", hits, fits=lambda text: False)
    assert (nothing.message, nothing.sources) == ("What goes in NOTICE?", [])

    assert grounding.cited("As [2] says, and [1, 3]; see [2][4] and [9].", 4) == [2, 1, 3, 4]


def test_the_user_chooses_how_many_passages_go_before_a_question(library, licenses):
    from engine.documents import grounding

    name = collection_of(library, licenses)
    indexer.update(library, name)
    question = "What may a licensee do with the software?"
    found = grounding.find_and_ground(library, [name], question, fits=lambda text: True)
    assert library.passages_per_question() == 6 and len(found.sources) == 6 and len(found.drafts) > 6
    library.set_passages_per_question(2)
    fewer = grounding.find_and_ground(library, [name], question, fits=lambda text: True)
    assert fewer.sources == found.sources[:2] and fewer.drafts == found.drafts  # drafted from all the same
    library.set_passages_per_question(100)
    assert library.passages_per_question() == 24  # as many as are found at most
    assert [c.name for c in library.collections()] == [name]  # the setting leaves the collections be


def test_generate_answers_from_a_collection_and_reports_its_sources(
    tmp_path, licenses, smollm2_path, monkeypatch, capsys
):
    import json

    from engine import cli

    monkeypatch.setenv("SPECULA_HOME", str(tmp_path / "home"))
    assert cli.main(["docs", "add", "licenses", str(licenses)]) == 0
    assert cli.main(["docs", "index", "licenses"]) == 0
    capsys.readouterr()
    question = "What goes in the NOTICE text file of Derivative Works?"
    code = cli.main(
        ["generate", "--model", smollm2_path, "--draft", "none", "--ctx", "2048", "--temperature", "0",
         "--max-tokens", "16", "--collection", "licenses", "--json", question]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    sources = result["sources"]
    assert sources and sources[0]["path"].endswith("Apache-2.0") and '"NOTICE" text file' in sources[0]["text"]
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    # The passages were in the prompt: far more prompt tokens than the question alone has.
    assert result["stats"]["n_prompt_tokens"] > 4 * len(question.split()) + 200

    assert cli.main(["generate", "--model", smollm2_path, "--collection", "nosuch", "hi"]) == 2
    assert "no collection named 'nosuch'" in capsys.readouterr().err


def test_the_engine_drafts_a_quote_from_the_documents_it_is_given(small_engine):
    """A real model quoting a passage: once two tokens of the quote match, its rounds are the documents
    drafter's (lookup, asked after it, would draft the same run), and nothing is left of the
    documents after the answer."""
    from engine.config import ChatMessage, DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
    from engine.decoding.events import DoneEvent, TokenEvent
    from tests.pinned_costs import pinned_costs

    passage = (
        "The Licensor shall not be liable for any damages arising from the use of the Work, "
        "including but not limited to lost profits, even if advised of the possibility of such damages."
    )
    messages = [ChatMessage("user", f"Repeat this sentence exactly, word for word:\n\n{passage}")]
    with pinned_costs(small_engine):  # which of two drafters offering the same run wins: not the machine's load
        events = list(
            small_engine.chat(
                messages, SamplingParams(temperature=0.0, max_tokens=48), SpecParams(mode=DrafterMode.LOOKUP),
                documents=[passage],
            )
        )  # fmt: skip
    done = events[-1]
    assert isinstance(done, DoneEvent) and "lost profits" in done.text
    quoted = [e for e in events if isinstance(e, TokenEvent) and e.source == TokenSource.DOCUMENTS]
    assert len(quoted) >= 5 and done.stats.tokens_by_source.get("documents", 0) == len(quoted)
    assert all(e.text.strip() in passage for e in quoted)
    assert done.stats.by_drafter()[DrafterKind.DOCUMENTS].accepted == len(quoted)
    assert small_engine.speculator.documents.indexes == []


def test_a_citation_gives_lines_only_where_they_are_the_files_own():
    assert readers.citation("/d/notes.md", None, 3, 9) == "notes.md, lines 3–9"
    assert readers.citation("/usr/share/common-licenses/GPL-3", None, 4, 4) == "GPL-3, line 4"
    assert readers.citation("/d/app.py", None, 10, 12) == "app.py, lines 10–12"
    # Read as Markdown made from the file: those lines are nowhere in the file as its program shows it.
    for name in ("plan.docx", "page.html", "minutes.odt", "book.epub", "rain.ipynb"):
        assert readers.citation(f"/d/{name}", None, 7, 9) == name
    assert readers.citation("/d/r.pdf", 2, 1, 5) == "r.pdf, page 2"
    assert readers.citation("C:\\d\\talk.pptx", 3, 1, 5) == "talk.pptx, slide 3"


def test_the_terminal_lists_sources_by_path_and_place_in_the_file():
    from engine.documents import grounding
    from engine.documents.cli import source_lines
    from engine.documents.retrieval import Hit

    hits = [
        Hit("c", "/d/notes.md", "x", "Meeting notes", 3, 3, None, 1.0),
        Hit("c", "/d/garden.docx", "y", "Garden plan › Budget", 7, 7, None, 0.5),
        Hit("c", "/d/guide.pdf", "z", "", 1, 4, 2, 0.2),
    ]
    assert source_lines(grounding.Grounded("q", hits), "As [2] says.") == [
        "Sources (* cited):",
        "  [1] /d/notes.md: line 3 · Meeting notes",
        "* [2] /d/garden.docx · Garden plan › Budget",
        "  [3] /d/guide.pdf: page 2",
    ]
