"""The history index without a model: the suffix array against a brute-force search, removal
without re-sorting, persistence across reopenings, forgetting, the caps, and damaged files."""

import json

import numpy as np

from engine.history.store import HistoryIndex, disk_bytes, forget_everywhere
from engine.history.suffix_index import SEP, SuffixIndex, brute_force_match, most_frequent_path

VOCAB = 12  # a tiny alphabet makes long repeated runs, the hard case for a suffix array


def corpus_of(docs):
    return np.concatenate([np.append(d, SEP) for d in docs]).astype(np.int32)


def random_docs(rng, n=60):
    return [rng.integers(0, VOCAB, rng.integers(5, 80)) for _ in range(n)]


def contexts(rng, docs, n=300):
    """Random contexts, half of them ending inside a document (so long matches exist)."""
    for i in range(n):
        if i % 2:
            doc = docs[rng.integers(len(docs))]
            yield rng.integers(0, VOCAB, 3).tolist() + doc[: rng.integers(1, len(doc) + 1)].tolist()
        else:
            yield rng.integers(0, VOCAB, rng.integers(1, 40)).tolist()


def same_match(a, b):
    return a.length == b.length and sorted(a.starts.tolist()) == sorted(b.starts.tolist())


def test_suffix_array_finds_what_brute_force_finds():
    rng = np.random.default_rng(1)
    docs = random_docs(rng)
    corpus = corpus_of(docs)
    index = SuffixIndex(corpus)
    assert len(index.sa) == int((corpus != SEP).sum())
    checked = 0
    for context in contexts(rng, docs):
        found, truth = index.longest_match(context), brute_force_match(corpus, context)
        assert found.length == truth.length, context
        if truth.count < 256:  # beyond that both keep a subset
            assert same_match(found, truth), context
        checked += found.length > 5
    assert checked > 50  # the long matches were exercised


def test_a_match_never_spans_two_documents():
    index = SuffixIndex(corpus_of([np.array([1, 2, 3]), np.array([4, 5, 6])]))
    assert index.longest_match([2, 3, 4, 5]).length == 2  # [4, 5] only: "3, 4" crosses the boundary
    assert index.longest_match([1, 2, 3]).starts.tolist() == [3]  # continues at the SEP: nothing to draft


def test_removing_documents_keeps_the_order_valid():
    rng = np.random.default_rng(2)
    docs = random_docs(rng)
    corpus = corpus_of(docs)
    keep = np.ones(len(corpus), bool)
    position = 0
    for i, doc in enumerate(docs):
        if i % 3 == 0:
            keep[position : position + len(doc) + 1] = False
        position += len(doc) + 1
    removed, rest = SuffixIndex(corpus).remove(keep), corpus[keep]
    assert np.array_equal(removed.tokens, rest)
    for context in contexts(rng, [d for i, d in enumerate(docs) if i % 3]):
        truth = brute_force_match(rest, context)
        assert removed.longest_match(context).length == truth.length, context


def test_the_most_frequent_continuation_is_drafted_while_enough_agree():
    rows = np.array([[5, 6, 7], [5, 6, 8], [5, 6, 7], [5, 9, 9]])
    assert most_frequent_path(rows, 3, 0.3) == ([5, 6, 7], [1.0, 0.75, 0.5])
    assert most_frequent_path(rows, 3, 0.6) == ([5, 6], [1.0, 0.75])
    assert most_frequent_path(rows, 1, 0.1)[0] == [5]
    assert most_frequent_path(np.array([[4, SEP, 3]]), 3, 0.1)[0] == [4]  # a document's end stops it


def history(tmp_path, **kw):
    return HistoryIndex(tmp_path / "vocab", VOCAB, **kw)


def test_documents_survive_a_restart_and_merge(tmp_path):
    index = history(tmp_path, tail_max=40)
    index.add(7, [1, 2, 3, 4, 5, 6])
    assert index.propose([9, 1, 2, 3], 8, 3, 0.3).tokens == [4, 5, 6]
    for i in range(10):  # enough to pass tail_max: a merge sorts them in the background
        index.add(8, [9, 9, i % VOCAB, 3, 3, 3, 1])
    assert index.wait(30)
    assert index._state.base.n > 0 and index.n_documents == 11
    index.add(9, [2, 2, 2, 11, 10])  # after the merge: in the tail
    index.close()
    again = history(tmp_path, tail_max=40)
    assert again.problem == ""
    assert again.n_documents == 12 and again.conversations() == {7, 8, 9}
    assert again.propose([0, 1, 2, 3], 8, 3, 0.3).tokens == [4, 5, 6]
    assert again.propose([2, 2, 2, 11], 8, 3, 0.3).tokens == [10]


def test_forgetting_a_conversation_removes_its_text_at_once_and_on_disk(tmp_path):
    index = history(tmp_path, tail_max=30)
    index.add(1, [1, 2, 3, 4, 5, 6, 7])
    for _ in range(5):
        index.add(2, [8, 8, 8, 9, 10])
    assert index.wait(30)
    index.add(1, [11, 11, 11, 0, 1])  # one in the sorted part, one in the tail
    assert index.propose([1, 2, 3], 8, 3, 0.3).tokens
    assert index.forget(1)
    assert index.propose([1, 2, 3], 8, 3, 0.3).tokens == []
    assert index.propose([11, 11, 11], 8, 3, 0.3).tokens == []
    assert index.propose([8, 8, 8], 8, 3, 0.3).tokens == [9, 10]
    assert not index.forget(1)
    again = history(tmp_path)
    assert again.conversations() == {2}
    assert again.propose([1, 2, 3], 8, 3, 0.3).tokens == []
    assert not any(b"\x01\x00\x00\x00\x02\x00\x00\x00\x03" in p.read_bytes() for p in again.folder.iterdir())


def test_forget_reaches_indexes_of_other_vocabularies(tmp_path):
    other = HistoryIndex(tmp_path / "other", VOCAB)
    other.add(5, [1, 2, 3, 4])
    other.close()
    mine = HistoryIndex(tmp_path / "mine", VOCAB)
    mine.add(5, [1, 2, 3, 4])
    mine.add(6, [1, 2, 3, 5])
    assert forget_everywhere(tmp_path, 5, mine) == 2
    assert mine.conversations() == {6}
    assert HistoryIndex(tmp_path / "other", VOCAB).conversations() == set()


def test_the_cap_drops_the_oldest_documents(tmp_path):
    index = history(tmp_path, max_tokens=100, tail_max=1000)
    for conversation in range(30):
        index.add(conversation, [conversation % VOCAB] * 3 + [1, 2])
    assert index.wait(30)
    assert index.n_tokens <= 100
    assert 29 in index.conversations() and 0 not in index.conversations()
    assert disk_bytes(tmp_path) < 4096


def test_a_damaged_index_starts_again_empty_with_a_message(tmp_path):
    index = history(tmp_path, tail_max=10)
    index.add(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    assert index.wait(30)
    index.close()
    meta = json.loads((index.folder / "index.json").read_text())
    tokens = index.folder / f"tokens-{meta['generation']}.npy"
    data = bytearray(tokens.read_bytes())
    data[-4:] = (999).to_bytes(4, "little", signed=True)  # a token outside the vocabulary
    tokens.write_bytes(bytes(data))
    damaged = history(tmp_path)
    assert "could not be read" in damaged.problem and damaged.n_tokens == 0
    damaged.add(2, [3, 3, 3, 4])  # and it works again
    assert history(tmp_path).conversations() == {2}


def test_a_record_cut_short_at_the_end_of_the_tail_is_ignored(tmp_path):
    index = history(tmp_path)
    index.add(1, [1, 2, 3, 4])
    index.add(2, [5, 6, 7, 8])
    index.close()
    tail = next(index.folder.glob("tail-*.bin"))
    tail.write_bytes(tail.read_bytes()[:-4])  # the crash came mid-write
    again = history(tmp_path)
    assert again.problem == "" and again.conversations() == {1}


def test_tokens_outside_the_vocabulary_are_not_indexed(tmp_path):
    index = history(tmp_path)
    index.add(1, [1, 2, VOCAB + 5, -3, 3])
    assert index.n_tokens == 4  # three tokens and the separator
