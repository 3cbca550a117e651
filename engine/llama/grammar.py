"""A llama.cpp grammar over one vocabulary: which tokens may come next, and advancing it by one.

A lazy grammar (llama_sampler_init_grammar_lazy_patterns) lets everything through until a trigger
pattern is found in the text generated so far (std::regex_search; only a pattern written ^...$ must
match the whole text), then constrains from the pattern's first group on: the model writes freely until it opens a tool call, and the call
must then parse. The state is advanced only by tokens that were committed (engine/decoding/
tool_grammar.py keeps a copy per verified position), so rejected drafts never reach it.

llama.cpp aborts the process when a grammar is made to accept a token it forbids, or an end of
generation before it is complete: callers accept only tokens mask()/allows() let through and never
an end-of-generation token. While a lazy grammar waits, llama.cpp lets every token through, including
one that opens a call and goes on with text the grammar cannot take (a token `"}` after `{"name":
"get_weather`: the grammar would start at `{` and wants the arguments after the name). Accepting it
aborts, so the triggers are mirrored here (TriggerWatch) and such a token is forbidden like any other
the grammar rules out.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from engine.errors import EngineError

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)

_SPACE = b" \t\n\r\x0b\x0c"  # what std::regex's \s matches in the "C" locale, as bytes.lstrip() strips


class GrammarError(EngineError):
    """llama.cpp refused the grammar (its text does not parse)."""


@dataclass(frozen=True)
class Trigger:
    """Where a lazy grammar takes over: at `text` anywhere in the answer, or only at its start (after
    whitespace). The grammar then holds from the first byte of `text` on."""

    text: str
    anywhere: bool

    def pattern(self) -> str:
        """The std::regex llama.cpp searches the answer so far for. No `[\\s\\S]*` around it: searching
        already finds it anywhere, and libstdc++'s regex recurses once per character such a loop
        takes, which a long answer turns into a stack overflow."""
        literal = _escaped(self.text)
        return f"({literal})" if self.anywhere else f"^\\s*({literal})"


def _escaped(text: str) -> str:
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/" else c for c in text)


@dataclass(frozen=True)
class StartTrigger:
    """Start triggers spelled as one choice from each slot in turn: `{`, then any of the ways models
    space a key, then `"name": ` and the name of one tool offered, say. llama.cpp gets one pattern
    with a group of choices per slot, not one alternative per spelling: libstdc++'s regex aborts
    the process past 100,000 states, which some 3,000 spelled-out alternatives reach."""

    slots: tuple[tuple[str, ...], ...]

    def literals(self) -> list[Trigger]:
        """Every spelling, as the triggers the mirror (TriggerWatch) watches for."""
        return [Trigger("".join(parts), anywhere=False) for parts in itertools.product(*self.slots)]

    def pattern(self) -> str:
        choices = "".join("(?:" + "|".join(_escaped(c) for c in slot) + ")" for slot in self.slots)
        return f"^\\s*({choices})"


def _spelled(triggers: Sequence[Trigger | StartTrigger]) -> list[Trigger]:
    return [t for trigger in triggers for t in (trigger.literals() if isinstance(trigger, StartTrigger) else [trigger])]


class VocabPieces:
    """A vocabulary's token bytes as the grammar sees them (special tokens rendered), with the indexes
    the trigger watch needs. Built once per model (about 0.3 s for 150,000 tokens)."""

    def __init__(self, vocab):
        self.vocab = vocab
        n = llama_cpp.llama_vocab_n_tokens(vocab)
        buf = ctypes.create_string_buffer(256)
        pieces = []
        for token in range(n):
            size = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
            if size < 0:  # a longer piece (runs of spaces): asked again with room for it
                long = ctypes.create_string_buffer(-size)
                size = llama_cpp.llama_token_to_piece(vocab, token, long, len(long), 0, True)
                pieces.append(long.raw[: max(size, 0)])
                continue
            pieces.append(buf.raw[:size])
        self.pieces = pieces
        # One token per byte (byte-level BPE and SentencePiece byte fallback both have them): text the
        # grammar is asked to take is checked byte by byte.
        self.byte_token: dict[int, int] = {}
        for token, piece in enumerate(pieces):
            if len(piece) == 1 and not llama_cpp.llama_vocab_is_control(vocab, token):
                self.byte_token.setdefault(piece[0], token)
        self._containing: dict[tuple[bytes, bool], np.ndarray] = {}

    def starting_with(self, first: bytes, after_space: bool) -> np.ndarray:
        """Ids of the tokens whose bytes begin with `first` (after_space: once leading whitespace is
        stripped)."""
        key = (first, after_space)
        if key not in self._containing:
            strip = (lambda p: p.lstrip(_SPACE)) if after_space else (lambda p: p)
            self._containing[key] = np.array(
                [t for t, p in enumerate(self.pieces) if strip(p).startswith(first)], dtype=np.int64
            )
        return self._containing[key]

    def containing(self, byte: bytes) -> np.ndarray:
        key = (byte, None)
        if key not in self._containing:
            self._containing[key] = np.array([t for t, p in enumerate(self.pieces) if byte in p], dtype=np.int64)
        return self._containing[key]


class TriggerWatch:
    """What llama.cpp's lazy grammar has seen while it waits, kept only as far as the triggers need it
    (the end of the answer, and its start while that could still open a call)."""

    def __init__(self, triggers: Sequence[Trigger | StartTrigger]):
        self.triggers = [(t.text.encode(), t.anywhere) for t in _spelled(triggers)]
        # Once the start can open nothing, only these are looked at: a tool list spells hundreds of starts.
        self._anywhere = [(text, anywhere) for text, anywhere in self.triggers if anywhere]
        self._starts = [text for text, anywhere in self.triggers if not anywhere]
        self._keep = max(len(text) for text, _ in self.triggers) - 1
        self.tail = b""  # the last bytes written
        self.start: bytes | None = b""  # the answer without leading whitespace, while a trigger may open it

    def copy(self) -> TriggerWatch:
        other = TriggerWatch.__new__(TriggerWatch)
        other.triggers, other._keep, other.tail, other.start = self.triggers, self._keep, self.tail, self.start
        other._anywhere, other._starts = self._anywhere, self._starts
        return other

    def opened(self, piece: bytes) -> bytes | None:
        """The text the grammar is handed if `piece` comes next (from the trigger on), or None if the
        grammar still waits. The first trigger that matches wins, as in llama.cpp."""
        for text, anywhere in self.triggers if self.start is not None else self._anywhere:
            if anywhere:
                written = self.tail + piece
                at = written.find(text)
                if at >= 0:
                    return written[at:]
            elif self.start is not None:
                written = self.start + piece if self.start else piece.lstrip(_SPACE)
                if written.startswith(text):
                    return written
        return None

    def advance(self, piece: bytes) -> None:
        """Record a piece that did not open the grammar."""
        self.tail = (self.tail + piece)[-self._keep :] if self._keep else b""
        if self.start is not None:
            start = self.start + piece if self.start else piece.lstrip(_SPACE)
            self.start = start if any(text.startswith(start) for text in self._starts) else None

    def key(self) -> tuple:
        """What decides which tokens open the grammar, and with what: the end of the answer that begins
        an anywhere-trigger, and the start while one may open it."""
        ends = []
        for text, anywhere in self.triggers:
            if anywhere:
                ends.append(next((j for j in range(len(text) - 1, 0, -1) if self.tail.endswith(text[:j])), 0))
        return tuple(ends), self.start

    def candidates(self, pieces: VocabPieces) -> np.ndarray:
        """Every token that could open the grammar from here (a superset: opened() decides)."""
        parts = []
        for text, anywhere in self.triggers:
            if anywhere:
                parts.append(pieces.containing(text[-1:]))
            elif self.start is not None and text.startswith(self.start):
                rest = text[len(self.start) :]
                parts.append(pieces.starting_with(rest[:1], after_space=not self.start))
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


class _Lazy:
    """What all states of one lazy grammar share: a non-lazy probe of the same grammar, and which tokens
    open it with text it cannot take, per trigger-watch key."""

    def __init__(self, pieces: VocabPieces, gbnf: str, root: str, triggers: Sequence[Trigger | StartTrigger]):
        self.pieces = pieces
        self.triggers = list(triggers)
        self.probe = _new_sampler(pieces.vocab, gbnf, root)
        self._takes: dict[bytes, bool] = {}
        self._forbidden: dict[tuple, np.ndarray] = {}

    def takes(self, text: bytes) -> bool:
        """The grammar, from its start, accepts text as a beginning (fed byte by byte to a copy)."""
        known = self._takes.get(text)
        if known is None:
            state = Grammar(self.pieces, _sampler=llama_cpp.llama_sampler_clone(self.probe))
            known = True
            for byte in text:
                token = self.pieces.byte_token.get(byte)
                if token is None or not state.allows(token):
                    known = False
                    break
                state.accept(token)
            state.close()
            self._takes[text] = known
        return known

    def forbidden(self, watch: TriggerWatch) -> np.ndarray:
        """Ids of the tokens that would open the grammar with text it cannot take."""
        key = watch.key()
        ids = self._forbidden.get(key)
        if ids is None:
            bad = []
            for token in watch.candidates(self.pieces):
                opened = watch.opened(self.pieces.pieces[token])
                if opened is not None and not self.takes(opened):
                    bad.append(token)
            ids = self._forbidden[key] = np.array(bad, dtype=np.int64)
        return ids

    def close(self) -> None:
        if self.probe:
            llama_cpp.llama_sampler_free(self.probe)
            self.probe = None

    def __del__(self):
        self.close()


def _new_sampler(vocab, gbnf: str, root: str, triggers: Sequence[Trigger | StartTrigger] = ()):
    if triggers:
        keep = [t.pattern().encode() for t in triggers]
        array = (ctypes.c_char_p * len(keep))(*keep)
        smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
            vocab, gbnf.encode(), root.encode(), array, len(keep), None, 0
        )
    else:  # not lazy: constrained from the first token
        smpl = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), root.encode())
    if not smpl:
        raise GrammarError("llama.cpp could not parse the tool-call grammar")
    return smpl


class Grammar:
    """One grammar sampler's state. Not thread-safe; free it with close()."""

    def __init__(
        self,
        pieces: VocabPieces,
        gbnf: str = "",
        triggers: Sequence[Trigger | StartTrigger] = (),
        root: str = "root",
        _sampler=None,
        _lazy: _Lazy | None = None,
        _watch: TriggerWatch | None = None,
    ):
        """triggers: where a lazy grammar takes over (none: the grammar holds from the first token)."""
        self._pieces = pieces
        self._lazy, self._watch = _lazy, _watch  # the watch is None once the grammar holds
        if _sampler is not None:
            self._smpl = _sampler
            return
        self._smpl = _new_sampler(pieces.vocab, gbnf, root, triggers)
        if triggers:
            self._lazy, self._watch = _Lazy(pieces, gbnf, root, triggers), TriggerWatch(triggers)

    @property
    def waiting(self) -> bool:
        """A lazy grammar not yet triggered."""
        return self._watch is not None

    def clone(self) -> Grammar:
        watch = self._watch.copy() if self._watch is not None else None
        return Grammar(self._pieces, _sampler=llama_cpp.llama_sampler_clone(self._smpl), _lazy=self._lazy, _watch=watch)

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._smpl, token)
        if self._watch is not None:
            piece = self._pieces.pieces[token]
            if self._watch.opened(piece) is not None:
                self._watch = None
            else:
                self._watch.advance(piece)

    def allows(self, token: int) -> bool:
        """token may come next (a one-token candidate list: cheap, unlike mask())."""
        if self._watch is not None:
            opened = self._watch.opened(self._pieces.pieces[token])
            return opened is None or self._lazy.takes(opened)
        data = np.zeros(1, _TOKEN_DATA)
        data["id"], data["logit"] = token, 0.0
        self._apply(data)
        return bool(np.isfinite(data["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of one row of logits with the tokens the grammar forbids at -inf."""
        if self._watch is not None:
            out = np.array(logits, dtype=np.float32)
            out[self._lazy.forbidden(self._watch)] = -np.inf
            return out
        data = np.zeros(len(logits), _TOKEN_DATA)
        data["id"] = np.arange(len(logits), dtype=np.int32)
        data["logit"] = logits
        self._apply(data)
        return data["logit"].copy()

    def mask_ids(self, logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The logits of ids (a candidate set) with those the grammar forbids at -inf."""
        if self._watch is not None:
            out = np.array(logits[ids], dtype=np.float32)
            out[np.isin(ids, self._lazy.forbidden(self._watch))] = -np.inf
            return out
        data = np.zeros(len(ids), _TOKEN_DATA)
        data["id"], data["logit"] = ids, logits[ids]
        self._apply(data)
        return data["logit"].copy()

    def _apply(self, data: np.ndarray) -> None:
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=len(data), selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self._smpl, ctypes.byref(array))

    def take(self, other: Grammar) -> None:
        """Become other's state (other is consumed)."""
        self.close()
        self._smpl, other._smpl = other._smpl, None
        self._watch, self._lazy = other._watch, other._lazy

    def close(self) -> None:
        if self._smpl:
            llama_cpp.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self):
        self.close()
