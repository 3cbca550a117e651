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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol

from engine.decoding.drafters import joined_index
from engine.history.suffix_index import SuffixIndex

log = logging.getLogger(__name__)

MAX_TOKENS = 4_000_000  # ~32 MB in memory (the tokens and their suffix array)
KEPT = 2


class WholeText(Protocol):
    """The text to index (engine.documents.whole_text.WholeText is one): which collections, what their
    text is now, and the passages themselves."""

    def version(self) -> Hashable | None: ...  # None: it cannot be read now

    def texts(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class _Built:
    version: Hashable
    index: SuffixIndex | None  # None: the collections hold no text
    n_tokens: int


class CollectionTokens:
    def __init__(self, tokenize: Callable[[str], list[int]], max_tokens: int = MAX_TOKENS):
        self._tokenize = tokenize
        self.max_tokens = max_tokens
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
        with self._lock:
            if self._wanted == (text, version):
                self._built.pop(text, None)
                self._built[text] = _Built(version, index, n)
                while len(self._built) > KEPT:
                    del self._built[next(iter(self._built))]
