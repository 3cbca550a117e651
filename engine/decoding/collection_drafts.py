"""The whole text of a chat's document collections as one suffix index in the target's tokens, so
that a quote of a passage no search found drafts too (DocumentDrafter asks it beside the passages
found for the answer).

Built on a thread of its own: tokenizing runs at about 1 MB of text a second on 2 CPU cores (a
suffix array of a million tokens takes under a second more), so a large collection would hold an
answer up for seconds. Until the index is ready, the answer drafts from the passages found alone;
while a changed collection is indexed again, from the index of its previous text (drafting is
lossless: stale text costs speed, never correctness). Indexes are kept for the KEPT sets of
collections asked last (two chats, each with its own, are answered in turn without indexing again),
each of at most MAX_TOKENS tokens (about 16 MB of text: the passages indexed first). Tokenizing
reads only the model's vocabulary, which llama.cpp allows beside decoding; close() waits for the
thread before the model goes.

A built index is also kept on disk, beside the library's own index (WholeText.cache_folder), per
vocabulary and version of the text: after a restart the same collections load in a fraction of a
second instead of being tokenized again, which on 2 cores would slow the first answers. The newest
KEPT_FILES are kept; a file that cannot be read back, or does not hold a suffix array of its tokens,
is removed and the index built again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import zipfile
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from engine.decoding.drafters import joined_index
from engine.history.suffix_index import SEP, SuffixIndex

log = logging.getLogger(__name__)

MAX_TOKENS = 4_000_000  # ~32 MB in memory (the tokens and their suffix array)
KEPT = 2
KEPT_FILES = 4  # on disk: up to ~32 MB each
CACHE_VERSION = 1


class WholeText(Protocol):
    """The text to index (engine.documents.whole_text.WholeText is one): which collections, what their
    text is now, and the passages themselves."""

    def version(self) -> Hashable | None: ...  # None: it cannot be read now

    def texts(self) -> Iterable[str]: ...

    def cache_folder(self) -> Path | None: ...  # where built indexes may be kept (None: nowhere)


@dataclass(frozen=True)
class _Built:
    version: Hashable
    index: SuffixIndex | None  # None: the collections hold no text
    n_tokens: int


class CollectionTokens:
    def __init__(self, tokenize: Callable[[str], list[int]], max_tokens: int = MAX_TOKENS, vocabulary: str = ""):
        """vocabulary: what identifies the tokenizer (a vocabulary's fingerprint), for indexes kept on disk;
        "" keeps none."""
        self._tokenize = tokenize
        self.max_tokens = max_tokens
        self.vocabulary = vocabulary
        self._lock = threading.Lock()
        self._built: dict[Hashable, _Built] = {}  # by WholeText, the last asked last
        self._wanted: tuple[Hashable, Hashable] | None = None  # (text, version) the thread is building
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def index_for(self, text: WholeText | None) -> SuffixIndex | None:
        """The index of these collections as far as it is built (None: not yet, or no collections);
        starts indexing their text when it is new or has changed."""
        if text is None or self._closed.is_set():
            return None
        version = text.version()
        with self._lock:
            built = self._built.pop(text, None)
            if built is not None:
                self._built[text] = built  # asked last
            current = built is not None and built.version == version
            if version is not None and not current and self._wanted != (text, version):
                self._start(text, version)
        return built.index if built is not None else None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the indexing under way (True: none is left)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def n_tokens(self, text: WholeText) -> int:
        """Tokens in the index of these collections now (0: none)."""
        built = self._built.get(text)
        return built.n_tokens if built is not None else 0

    def close(self) -> None:
        self._closed.set()
        self.wait()

    def _start(self, text: WholeText, version: Hashable) -> None:
        # Called with the lock held. A thread still building an older version sees it is no longer wanted.
        self._wanted = (text, version)
        self._thread = threading.Thread(target=self._build, args=(text, version), name="collection-tokens", daemon=True)
        self._thread.start()

    def _build(self, text: WholeText, version: Hashable) -> None:
        pieces, n = [], 0
        kept = self._kept_file(text, version)
        index = _load(kept) if kept is not None else None
        if index is not None:
            n = index.n
        else:
            try:
                for passage in text.texts():
                    if self._closed.is_set() or self._wanted != (text, version):
                        return
                    tokens = self._tokenize(passage)
                    if n + len(tokens) + 1 > self.max_tokens:
                        log.info("collections drafted from their first %d tokens only", n)
                        break
                    pieces.append(tokens)
                    n += len(tokens) + 1
                index = joined_index(pieces)
            except Exception as e:  # noqa: BLE001 - the index unreadable or changing under us: draft without it
                log.warning("collections not indexed for drafting: %s", e)
                index, n = None, 0
            else:
                if kept is not None and index is not None:
                    _save(kept, index)
        with self._lock:
            if self._wanted == (text, version):
                self._built.pop(text, None)
                self._built[text] = _Built(version, index, n)
                while len(self._built) > KEPT:
                    del self._built[next(iter(self._built))]

    def _kept_file(self, text: WholeText, version: Hashable) -> Path | None:
        """Where this text's index, in this vocabulary and version, is kept on disk (None: not kept)."""
        folder = text.cache_folder() if self.vocabulary else None
        if folder is None:
            return None
        key = f"{CACHE_VERSION}|{self.vocabulary}|{self.max_tokens}|{text!r}|{version!r}"
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def _load(path: Path) -> SuffixIndex | None:
    """The index kept at path, or None (none kept, or one that is not what was written: removed)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as kept:
            tokens, sa = kept["tokens"], kept["sa"]
        if tokens.dtype != np.int32 or sa.dtype != np.int32 or tokens.ndim != 1 or sa.ndim != 1:
            raise ValueError("not arrays of token ids")
        if len(sa) != int((tokens != SEP).sum()) or (len(sa) and (sa.min() < 0 or sa.max() >= len(tokens))):
            raise ValueError("the suffix array does not fit its tokens")
        if len(sa) and np.bincount(sa, minlength=len(tokens)).max() > 1:
            raise ValueError("the suffix array repeats a position")
        os.utime(path)  # used now: the last to be pruned
        return SuffixIndex(tokens, sa)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # np.load's ways to say damaged
        log.warning("the collections' drafting index kept in %s is unreadable (%s): indexing again", path, e)
        path.unlink(missing_ok=True)
        return None


def _save(path: Path, index: SuffixIndex) -> None:
    """Keep index at path (written whole, then renamed), and only the newest KEPT_FILES beside it."""
    partial = path.with_suffix(f".{os.getpid()}.partial")  # two processes (the app, the terminal) may both write
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as f:
            np.savez(f, tokens=np.ascontiguousarray(index.tokens), sa=index.sa)
        os.replace(partial, path)
        older = sorted(path.parent.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)[KEPT_FILES:]
        for old in older:
            old.unlink(missing_ok=True)
    except OSError as e:  # a full disk, a read-only folder: drafting goes on from memory
        log.warning("the collections' drafting index was not kept on disk: %s", e)
        partial.unlink(missing_ok=True)
