"""Drafting from the whole text of a chat's collections (engine/documents/whole_text.py,
engine/decoding/collection_drafts.py, DocumentDrafter): every passage read as a prompt gives it,
indexed in the model's tokens on a thread of its own, rebuilt when the collection changes, and a
quote of a passage no search found drafted by a real model, losslessly."""

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams, TokenSource
from engine.decoding import collection_drafts
from engine.decoding.collection_drafts import CollectionTokens
from engine.decoding.drafters import DocumentDrafter, joined_index
from engine.documents import indexer
from engine.documents.library import Library
from engine.documents.reflow import for_prompt
from engine.documents.whole_text import WholeText
from tests.pinned_costs import pinned_costs

LICENSES = Path("/usr/share/common-licenses")
# GPL-3's paragraph on devices, as the file wraps it and as a model quotes it (one space between words).
DEVICES = "Some devices are designed to deny users access to install or run modified versions of the software"


def by_bytes(text: str) -> list[int]:
    """A tokenizer for the tests that are not about tokens: one token per byte."""
    return list(text.encode())


@pytest.fixture
def library(tmp_path):
    lib = Library(tmp_path / "library")
    yield lib
    lib.close()


def collection(library: Library, tmp_path: Path, name: str, licences: list[str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for licence in licences:
        shutil.copy(LICENSES / licence, folder / licence)
    library.add_collection(name)
    library.add_sources(name, [folder])
    indexer.update(library, name)
    return folder


def test_the_whole_text_is_every_passage_as_a_prompt_gives_it_and_its_version_follows_changes(library, tmp_path):
    folder = collection(library, tmp_path, "licences", ["GPL-3", "BSD"])
    whole = WholeText(library.index_file, ("licences",))
    texts = list(whole.texts())
    assert len(texts) == library.counts("licences")[1]
    assert any(DEVICES in t for t in texts)  # reflowed: the file breaks this sentence across lines
    assert DEVICES not in (LICENSES / "GPL-3").read_text()
    rows = library.db.execute("SELECT files.path, passages.text FROM passages JOIN files ON files.id = file_id")
    assert sorted(texts) == sorted(for_prompt(path, text) for path, text in rows)

    versions = [whole.version()]
    (folder / "BSD").write_text((folder / "BSD").read_text() + "\nOne more line.\n")
    indexer.update(library, "licences")
    versions.append(whole.version())
    (folder / "notes.txt").write_text("A new note.\n")
    indexer.update(library, "licences")
    versions.append(whole.version())
    (folder / "notes.txt").unlink()
    indexer.update(library, "licences")
    versions.append(whole.version())
    assert None not in versions and len(set(versions[:3])) == 3
    assert versions[3] == versions[1]  # the same text again: nothing to build again
    assert WholeText(library.index_file, ("nosuch",)).version() == (0, 0, 0, 0.0)
    assert list(WholeText(library.index_file, ("nosuch",)).texts()) == []
    assert WholeText(tmp_path / "missing.sqlite3", ("licences",)).version() is None  # said, not raised


def test_the_index_is_built_in_the_background_and_rebuilt_when_the_collection_changes(library, tmp_path):
    folder = collection(library, tmp_path, "licences", ["BSD"])
    other_folder = collection(library, tmp_path, "other", ["CC0-1.0"])
    whole, other = WholeText(library.index_file, ("licences",)), WholeText(library.index_file, ("other",))
    tokens = CollectionTokens(by_bytes)
    try:
        assert tokens.index_for(whole) is None  # not built yet: the answer drafts without it
        assert tokens.wait(60)
        index = tokens.index_for(whole)
        assert index is not None and tokens.n_tokens(whole) == sum(len(by_bytes(t)) + 1 for t in whole.texts())
        assert index.longest_match(by_bytes("Redistribution and use in source")).length == 32

        (folder / "BSD").write_text((folder / "BSD").read_text() + "\nThe quokka clause.\n")
        indexer.update(library, "licences")
        assert tokens.index_for(whole) is index  # the old text's index meanwhile: still the right collections
        assert tokens.wait(60)
        assert tokens.index_for(whole).longest_match(by_bytes("The quokka clause.")).length == 18

        assert tokens.index_for(other) is None  # another chat's collections: never the first one's index
        assert tokens.wait(60) and tokens.index_for(other) is not None
        assert tokens.index_for(other).longest_match(by_bytes("The quokka")).length < 10
        kept = tokens.index_for(whole)
        assert kept is not None and tokens.wait(1)  # both kept: answered in turn without indexing again
        third = WholeText(library.index_file, ("licences", "other"))
        tokens.index_for(third)
        assert tokens.wait(60) and tokens.index_for(third) is not None and tokens.index_for(whole) is kept
        assert tokens.index_for(other) is None  # the one asked longest ago made room
        assert other_folder.is_dir()
    finally:
        tokens.close()
    assert tokens.index_for(whole) is None  # closed: the model may be gone

    capped = CollectionTokens(by_bytes, max_tokens=3000)
    try:
        capped.index_for(whole)
        assert capped.wait(60) and 0 < capped.n_tokens(whole) <= 3000  # the first passages, up to the cap
    finally:
        capped.close()


def test_a_built_index_is_kept_on_disk_and_a_restart_loads_it_without_tokenizing(library, tmp_path, monkeypatch):
    collection(library, tmp_path, "licences", ["BSD", "CC0-1.0"])
    whole = WholeText(library.index_file, ("licences",))
    tokenized = []

    def counting(text: str) -> list[int]:
        tokenized.append(text)
        return by_bytes(text)

    def built(vocabulary: str):
        tokens = CollectionTokens(counting, vocabulary=vocabulary)
        try:
            tokens.index_for(whole)
            assert tokens.wait(60)
            return tokens.index_for(whole), tokens.n_tokens(whole)
        finally:
            tokens.close()

    first, n_first = built("bytes")
    [kept] = whole.cache_folder().glob("*.npz")
    assert whole.cache_folder().parent == library.index_file.parent  # Specula's folder, not the user's
    asked = len(tokenized)
    again, n_again = built("bytes")  # the app started again
    assert len(tokenized) == asked  # loaded, not tokenized
    assert np.array_equal(again.tokens, first.tokens) and np.array_equal(again.sa, first.sa) and n_again == n_first
    assert again.longest_match(by_bytes("Redistribution and use in source")).length == 32

    built("another vocabulary")  # its own tokens: indexed, and kept beside
    assert len(tokenized) == 2 * asked and len(list(whole.cache_folder().glob("*.npz"))) == 2
    monkeypatch.setattr(collection_drafts, "KEPT_FILES", 1)
    built("a third")
    assert len(list(whole.cache_folder().glob("*.npz"))) == 1  # only the newest kept

    # Damaged on disk (cut short, or arrays that are not an index of each other): built again, never raised.
    first, _ = built("bytes")
    [kept] = whole.cache_folder().glob("*.npz")
    kept.write_bytes(kept.read_bytes()[:300])
    asked = len(tokenized)
    rebuilt, _ = built("bytes")
    assert len(tokenized) > asked and np.array_equal(rebuilt.sa, first.sa)  # tokenized again
    with open(kept, "wb") as f:
        np.savez(f, tokens=first.tokens, sa=np.zeros_like(first.sa))
    asked = len(tokenized)
    rebuilt, _ = built("bytes")
    assert len(tokenized) > asked and np.array_equal(rebuilt.sa, first.sa)
    assert not list(whole.cache_folder().glob("*.partial"))


def test_a_damaged_index_drafts_nothing_from_the_collections_and_raises_nothing(tmp_path):
    broken = tmp_path / "index.sqlite3"
    broken.write_bytes(b"not a database" * 100)
    tokens = CollectionTokens(by_bytes)
    try:
        assert tokens.index_for(WholeText(broken, ("licences",))) is None
        assert tokens.wait(60) and tokens.index_for(WholeText(broken, ("licences",))) is None
    finally:
        tokens.close()
    with pytest.raises(sqlite3.DatabaseError):
        list(WholeText(broken, ("licences",)).texts())  # read on the builder's thread, which logs it


def test_the_documents_drafter_takes_the_longer_match_and_the_passage_found_at_a_tie():
    found = [10, 11, 12, 13, 14, 15]
    whole = [1, 2, 3, 10, 11, 12, 13, 20, 21, 5, 6, 7, 8, 9, 30, 31]
    drafter = DocumentDrafter()
    drafter.use([found], joined_index([whole]))
    tokens, length, _ = drafter.match([0, 5, 6, 7, 8, 9], 4)  # only in the whole text
    assert (tokens, length) == ([30, 31], 5)
    tokens, length, _ = drafter.match([0, 12, 13], 4)  # in both, as long: the passage found goes on
    assert length == 2 and tokens == [14, 15]
    tokens, length, _ = drafter.match([3, 10, 11, 12, 13], 4)  # longer in the whole text
    assert length == 5 and tokens == [20, 21, 5, 6]
    drafter.use([])
    assert drafter.indexes == []


def test_a_real_model_quoting_a_passage_no_search_found_drafts_it_from_the_collection(small_engine, library, tmp_path):
    """Nothing found for the answer (documents empty): the quote drafts from the collection's whole
    text, colour "documents", and the answer is plain decoding's."""
    from engine.config import ChatMessage
    from engine.decoding.events import DoneEvent, TokenEvent

    collection(library, tmp_path, "licences", ["GPL-3"])
    whole = WholeText(library.index_file, ("licences",))
    small_engine.collection_tokens.index_for(whole)
    assert small_engine.collection_tokens.wait(120) and small_engine.collection_tokens.n_tokens(whole) > 5000

    messages = [ChatMessage("user", f"Repeat this sentence exactly, word for word:\n\n{DEVICES}.")]
    sampling = SamplingParams(temperature=0.0, max_tokens=32)

    def answer(mode: DrafterMode, collections=whole):
        spec = SpecParams(mode=mode)
        with pinned_costs(small_engine):  # documents or lookup, where both match: not the machine's load
            events = list(small_engine.chat(messages, sampling, spec, collections=collections))
        assert isinstance(events[-1], DoneEvent)
        return [e for e in events if isinstance(e, TokenEvent) and e.source == TokenSource.DOCUMENTS], events[-1]

    quoted, done = answer(DrafterMode.LOOKUP)
    _, plain = answer(DrafterMode.OFF)
    assert done.text == plain.text and "deny users access" in done.text
    # SmolLM2-135M quotes loosely and lookup drafts short runs here: a few tokens, but only the collection had them.
    assert quoted and done.stats.by_drafter()[DrafterKind.DOCUMENTS].accepted == len(quoted)
    assert all(e.text.strip() in DEVICES for e in quoted)
    assert small_engine.speculator.documents.indexes == []  # held for that answer only
    alone, _ = answer(DrafterMode.LOOKUP, None)
    assert alone == []  # without the collection nothing is the documents'
