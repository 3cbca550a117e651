"""The user's earlier conversations as tokens, one index per vocabulary, kept in the data folder.

A folder per vocabulary fingerprint (a model with another vocabulary never reads it) holds:

    index.json        version, generation g, the vocabulary size, the documents [[conversation, length], ...]
    tokens-g.npy      the sorted part: documents' tokens, SEP after each (int32)
    sa-g.npy          its suffix array (int32)
    tail-g.bin        documents added since, appended as int32 records [conversation, length, tokens...]

A new generation is written beside the old one and index.json is replaced last, so a crash at
any point leaves one whole generation; a record cut short at the end of the tail is ignored.
Documents go to the tail (a brute-force search, cheap while it is small); once the tail holds
TAIL_MAX tokens a background thread sorts everything into a new generation, dropping the oldest
documents past the cap. Forgetting a conversation removes its documents at once, without
re-sorting (SuffixIndex.remove), and rewrites the files.

Threads: add, forget, erase and propose run on the engine's thread; the merge runs on its own
thread. Readers take the current _State without a lock (it is replaced whole, never changed).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.history.suffix_index import (
    MAX_MATCH,
    NO_MATCH,
    SEP,
    Match,
    SuffixIndex,
    brute_force_match,
    most_frequent_path,
)
from engine.json_file import write_json

log = logging.getLogger(__name__)

VERSION = 1
DEFAULT_MAX_TOKENS = 2_000_000  # per vocabulary: ~16 MB in memory and on disk (8 bytes a token)
TAIL_MAX = 32_768  # tokens searched unsorted before a merge sorts them in
MAX_DOCUMENT = 16_384  # longest document kept (a longer one keeps its end)

# Merges still running, by folder: an index opened on a folder waits for the last one's merge
# (a model reloaded mid-merge), so two objects never write one folder at once.
_merges: dict[Path, threading.Thread] = {}


@dataclass(frozen=True)
class _State:
    base: SuffixIndex
    base_docs: tuple[tuple[int, int], ...]  # (conversation, length) in corpus order
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # documents + SEP, unsorted
    tail_docs: tuple[tuple[int, int], ...] = ()

    @property
    def n_tokens(self) -> int:
        return self.base.n + len(self.tail)

    @property
    def docs(self) -> tuple[tuple[int, int], ...]:
        return self.base_docs + self.tail_docs


EMPTY = _State(SuffixIndex(np.zeros(0, np.int32)), ())


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    match_length: int  # tokens of context behind it
    occurrences: int  # earlier places the context's end was found (up to suffix_index.MAX_ROWS)
    support: list[float]  # per token, the fraction of those that went on as proposed up to it


NO_PROPOSAL = Proposal([], 0, 0, [])


class HistoryIndex:
    """One vocabulary's history: add documents, find continuations, forget conversations."""

    def __init__(self, folder: Path, n_vocab: int, max_tokens: int = DEFAULT_MAX_TOKENS, tail_max: int = TAIL_MAX):
        self.folder = Path(folder).resolve()
        earlier = _merges.get(self.folder)
        if earlier is not None:
            earlier.join()
        self.n_vocab = n_vocab
        self.max_tokens = max_tokens
        self.tail_max = tail_max
        self.problem = ""  # why the files on disk could not be used (then it started empty)
        self._lock = threading.RLock()  # writers and file operations; readers use self._state as is
        self._forgets = 0  # bumped by forget/erase: a merge started before one is redone
        self._merge: threading.Thread | None = None
        self._closed = False
        self._generation = 0
        self._state = EMPTY
        try:
            self._load()
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.problem = f"The history index in {self.folder} could not be read ({e}); it starts again empty."
            log.warning("%s", self.problem)
            self._state, self._generation = EMPTY, 0
            shutil.rmtree(self.folder, ignore_errors=True)
        if self._needs_merge():
            self._start_merge()

    # -- reading ---------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return self._state.n_tokens

    @property
    def n_documents(self) -> int:
        return len(self._state.docs)

    @property
    def memory_bytes(self) -> int:
        state = self._state
        return state.base.nbytes + state.tail.nbytes

    def conversations(self) -> set[int]:
        return {conversation for conversation, _ in self._state.docs}

    def match(self, context: Sequence[int]) -> tuple[Match, np.ndarray]:
        """The longest match of the context's end in the sorted part or the tail, and the
        continuation rows of its occurrences (both parts pooled when they match equally far)."""
        state = self._state
        in_base = state.base.longest_match(context)
        in_tail = brute_force_match(state.tail, context)
        best = max(in_base.length, in_tail.length)
        if best == 0:
            return NO_MATCH, np.zeros((0, 0), np.int32)
        rows = []
        if in_base.length == best:
            rows.append(state.base.continuations(in_base.starts, MAX_MATCH))
        if in_tail.length == best:
            rows.append(_tail_rows(state.tail, in_tail.starts, MAX_MATCH))
        starts = in_base.starts if in_base.length == best else in_tail.starts
        return Match(best, starts), np.concatenate(rows)

    def propose(self, context: Sequence[int], k_max: int, min_match: int, min_share: float) -> Proposal:
        """Up to k_max tokens: the most frequent continuation of the longest match, drafted as far as
        the match is long and while at least min_share of the occurrences agree."""
        if k_max < 1:
            return NO_PROPOSAL
        found, rows = self.match(context)
        if found.length < min_match:
            return NO_PROPOSAL
        tokens, support = most_frequent_path(rows, min(k_max, 2 * found.length), min_share)
        return Proposal(tokens, found.length, len(rows), support) if tokens else NO_PROPOSAL

    # -- writing ---------------------------------------------------------------------------

    def add(self, conversation: int, tokens: Sequence[int]) -> None:
        """Remember one document (a question and its answer) of a conversation."""
        self.add_many([(conversation, tokens)])

    def add_many(self, documents: Sequence[tuple[int, Sequence[int]]]) -> None:
        """Remember several documents at once (one copy of the tail, one write)."""
        kept = []
        for conversation, tokens in documents:
            doc = np.asarray(list(tokens)[-MAX_DOCUMENT:], np.int64)
            doc = doc[(doc >= 0) & (doc < self.n_vocab)].astype(np.int32)
            if len(doc):
                kept.append((int(conversation), doc))
        if not kept or self._closed:
            return
        with self._lock:
            state = self._state
            parts = [state.tail] + [np.append(doc, np.int32(SEP)) for _, doc in kept]
            self._state = _State(
                state.base,
                state.base_docs,
                np.concatenate(parts).astype(np.int32),
                state.tail_docs + tuple((conversation, len(doc)) for conversation, doc in kept),
            )
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                if not (self.folder / "index.json").exists():
                    self._write_generation(self._state.base, self._state.base_docs, self._generation)
                records = [np.concatenate([[conversation, len(doc)], doc]) for conversation, doc in kept]
                with open(self._tail_path(self._generation), "ab") as f:
                    np.concatenate(records).astype(np.int32).tofile(f)
            except OSError as e:  # a full disk: drafting still uses it until the app closes
                log.warning("could not save to the history index: %s", e)
        if self._needs_merge():
            self._start_merge()

    def merge_now(self) -> None:
        """Sort the tail in on this thread (benchmarks and tests; the app lets it happen in the background)."""
        self.wait()
        self._run_merge(force=True)

    def forget(self, conversation: int) -> bool:
        """Remove every document of a conversation, in memory and on disk, at once. True if it had any."""
        with self._lock:
            state = self._state
            if conversation not in {c for c, _ in state.docs}:
                return False
            self._forgets += 1
            self._state = self._without(state, lambda c: c == conversation)
            self._save_new_generation()
            return True

    def erase(self) -> None:
        """Forget everything and delete the folder."""
        with self._lock:
            self._forgets += 1
            self._state = EMPTY
            self._generation = 0
            shutil.rmtree(self.folder, ignore_errors=True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a merge in progress (benchmarks and tests). True when none is running."""
        merge = self._merge
        if merge is not None:
            merge.join(timeout)
            return not merge.is_alive()
        return True

    def close(self) -> None:
        """Stop accepting documents; a merge in progress finishes on its own (its files are written whole)."""
        self._closed = True

    # -- the parts -------------------------------------------------------------------------

    @staticmethod
    def _without(state: _State, drop) -> _State:
        """state minus the documents whose conversation satisfies drop (no re-sort)."""
        keep, base_docs = _kept(state.base_docs, state.base.n, drop)
        base = state.base.remove(keep) if not keep.all() else state.base
        tail_keep, tail_docs = _kept(state.tail_docs, len(state.tail), drop)
        return _State(base, base_docs, state.tail[tail_keep], tail_docs)

    def _needs_merge(self) -> bool:
        state = self._state
        return len(state.tail) >= self.tail_max or state.n_tokens > self.max_tokens

    def _start_merge(self) -> None:
        with self._lock:
            if self._closed or (self._merge is not None and self._merge.is_alive()):
                return
            self._merge = threading.Thread(target=self._run_merge, name="specula-history-merge", daemon=True)
            _merges[self.folder] = self._merge
            self._merge.start()

    def _run_merge(self, force: bool = False) -> None:
        try:
            while not self._closed and (force or self._needs_merge()):
                force = False
                state, forgets = self._state, self._forgets
                merged, docs = self._sorted(state)
                with self._lock:
                    if self._forgets != forgets:
                        continue  # something was forgotten meanwhile: sort again without it
                    now = self._state
                    added_since = now.tail_docs[len(state.tail_docs) :]
                    self._state = _State(merged, docs, now.tail[len(state.tail) :], added_since)
                    self._save_new_generation()
                    if not self._needs_merge():  # documents added meanwhile may call for another
                        return
        except Exception:  # noqa: BLE001 - a failed merge leaves the index as it was
            log.exception("merging the history index failed")

    def _sorted(self, state: _State) -> tuple[SuffixIndex, tuple[tuple[int, int], ...]]:
        """Base and tail as one sorted index, the oldest documents dropped to 90% of the cap."""
        docs = list(state.docs)
        corpus = np.concatenate([state.base.tokens, state.tail]).astype(np.int32)
        total, drop_docs, drop_tokens = len(corpus), 0, 0
        if total > self.max_tokens:
            while drop_docs < len(docs) and total - drop_tokens > 0.9 * self.max_tokens:
                drop_tokens += docs[drop_docs][1] + 1
                drop_docs += 1
        return SuffixIndex(corpus[drop_tokens:]), tuple(docs[drop_docs:])

    def _save_new_generation(self) -> None:
        """Write the current state as the next generation (base files, the tail, then index.json)."""
        state = self._state
        old, new = self._generation, self._generation + 1
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self._tail_path(new), "wb") as f:
                position = 0
                for conversation, length in state.tail_docs:
                    record = [conversation, length, *state.tail[position : position + length].tolist()]
                    np.asarray(record, np.int32).tofile(f)
                    position += length + 1
            self._write_generation(state.base, state.base_docs, new)
        except OSError as e:
            log.warning("could not save the history index: %s", e)
            return
        self._generation = new
        for name in (f"tokens-{old}.npy", f"sa-{old}.npy", f"tail-{old}.bin"):
            (self.folder / name).unlink(missing_ok=True)

    def _write_generation(self, base: SuffixIndex, docs, generation: int) -> None:
        for name, array in ((f"tokens-{generation}.npy", base.tokens), (f"sa-{generation}.npy", base.sa)):
            with open(self.folder / name, "wb") as f:
                np.save(f, np.ascontiguousarray(array))
                f.flush()
                os.fsync(f.fileno())
        write_json(
            self.folder / "index.json",
            {"version": VERSION, "generation": generation, "n_vocab": self.n_vocab, "docs": [list(d) for d in docs]},
            indent=None,
        )

    def _tail_path(self, generation: int) -> Path:
        return self.folder / f"tail-{generation}.bin"

    def _load(self) -> None:
        path = self.folder / "index.json"
        if not path.exists():
            return
        meta = json.loads(path.read_text("utf-8"))
        if meta.get("version") != VERSION:
            raise ValueError(f"version {meta.get('version')!r}, expected {VERSION}")
        if meta["n_vocab"] != self.n_vocab:
            raise ValueError(f"made for {meta['n_vocab']} tokens, this vocabulary has {self.n_vocab}")
        generation = int(meta["generation"])
        docs = tuple((int(c), int(n)) for c, n in meta["docs"])
        tokens = np.load(self.folder / f"tokens-{generation}.npy", allow_pickle=False)
        sa = np.load(self.folder / f"sa-{generation}.npy", allow_pickle=False)
        _check_corpus(tokens, docs, self.n_vocab)
        if sa.dtype != np.int32 or sa.ndim != 1 or len(sa) != int((tokens != SEP).sum()):
            raise ValueError("the suffix array does not fit its tokens")
        if len(sa) and (sa.min() < 0 or sa.max() >= len(tokens) or np.bincount(sa).max() > 1):
            raise ValueError("the suffix array is not a set of positions")
        tail, tail_docs = _read_tail(self._tail_path(generation), self.n_vocab)
        self._state = _State(SuffixIndex(tokens, sa), docs, tail, tail_docs)
        self._generation = generation


def _kept(docs, n_tokens: int, drop) -> tuple[np.ndarray, tuple[tuple[int, int], ...]]:
    """Which of n_tokens positions (documents laid out with a SEP after each) survive dropping the
    documents whose conversation satisfies drop, and the documents that stay."""
    keep = np.ones(n_tokens, bool)
    position, kept = 0, []
    for conversation, length in docs:
        if drop(conversation):
            keep[position : position + length + 1] = False
        else:
            kept.append((conversation, length))
        position += length + 1
    return keep, tuple(kept)


def _check_corpus(tokens: np.ndarray, docs, n_vocab: int) -> None:
    if tokens.dtype != np.int32 or tokens.ndim != 1:
        raise ValueError("the tokens are not a list of token ids")
    if len(tokens) != sum(n + 1 for _, n in docs) or any(n <= 0 for _, n in docs):
        raise ValueError("the documents do not add up to the tokens")
    ends = np.cumsum([n + 1 for _, n in docs]) - 1 if docs else np.zeros(0, np.int64)
    is_sep = tokens == SEP
    if not np.array_equal(np.flatnonzero(is_sep), ends):
        raise ValueError("documents are not where the index says")
    if len(tokens) and (tokens[~is_sep].min(initial=0) < 0 or tokens[~is_sep].max(initial=0) >= n_vocab):
        raise ValueError("a token id lies outside the vocabulary")


def _read_tail(path: Path, n_vocab: int) -> tuple[np.ndarray, tuple[tuple[int, int], ...]]:
    """The documents appended since the last merge; a record cut short (a crash mid-write) ends it."""
    if not path.exists():
        return np.zeros(0, np.int32), ()
    raw = np.fromfile(path, dtype=np.int32)
    parts, docs, position = [], [], 0
    while position + 2 <= len(raw):
        conversation, length = int(raw[position]), int(raw[position + 1])
        doc = raw[position + 2 : position + 2 + length]
        if length <= 0 or len(doc) < length or doc.min() < 0 or doc.max() >= n_vocab:
            break
        parts += [doc, np.array([SEP], np.int32)]
        docs.append((conversation, length))
        position += 2 + length
    return (np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)), tuple(docs)


def _tail_rows(tail: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    padded = np.concatenate([tail, np.full(k, SEP, np.int32)])
    return padded[starts[:, None] + np.arange(k)[None, :]]


# -- every vocabulary at once ----------------------------------------------------------------


def forget_everywhere(root: Path, conversation: int, open_index: HistoryIndex | None = None) -> int:
    """Remove a conversation from every vocabulary's index under root (the open one in memory too).
    Returns how many indexes held it."""
    found = 0
    if open_index is not None and open_index.forget(conversation):
        found += 1
    for folder in _folders(root):
        if open_index is not None and folder.resolve() == open_index.folder:
            continue
        try:
            meta = json.loads((folder / "index.json").read_text("utf-8"))
            held = any(int(c) == conversation for c, _ in meta["docs"])
            n_vocab = int(meta["n_vocab"])
        except (OSError, ValueError, KeyError, TypeError):
            held, n_vocab = True, 0  # unreadable: the tail may still hold it; checked below
        if not held:
            held = any(c == conversation for c, _ in _read_tail_docs(folder))
        if held:
            index = HistoryIndex(folder, n_vocab, max_tokens=1 << 40, tail_max=1 << 40)
            if index.forget(conversation) or index.problem:
                found += 1
            index.close()
    return found


def _read_tail_docs(folder: Path) -> list[tuple[int, int]]:
    """(conversation, length) of every tail record in a folder, whatever its generation."""
    docs = []
    for path in folder.glob("tail-*.bin"):
        raw = np.fromfile(path, dtype=np.int32)
        position = 0
        while position + 2 <= len(raw) and raw[position + 1] > 0:
            docs.append((int(raw[position]), int(raw[position + 1])))
            position += 2 + int(raw[position + 1])
    return docs


def erase_everywhere(root: Path, open_index: HistoryIndex | None = None) -> None:
    if open_index is not None:
        open_index.erase()
    shutil.rmtree(root, ignore_errors=True)


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file()) if Path(root).exists() else 0


def _folders(root: Path) -> list[Path]:
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
