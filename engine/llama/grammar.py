"""A llama.cpp grammar over one vocabulary: which tokens may come next, and advancing it by one.

A lazy grammar (llama_sampler_init_grammar_lazy_patterns) lets everything through until the text
generated so far matches a trigger pattern (the whole text, as std::regex_match does), then constrains
from the pattern's first group on: the model writes freely until it opens a tool call, and the call
must then parse. The state is advanced only by tokens that were committed (engine/decoding/
tool_grammar.py keeps a copy per verified position), so rejected drafts never reach it.

llama.cpp aborts the process when a grammar is made to accept a token it forbids, or an end of
generation before it is complete: callers accept only tokens mask()/allows() let through and never
an end-of-generation token.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp
import numpy as np

from engine.errors import EngineError

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class GrammarError(EngineError):
    """llama.cpp refused the grammar (its text does not parse)."""


class Grammar:
    """One grammar sampler's state. Not thread-safe; free it with close()."""

    def __init__(self, vocab, gbnf: str = "", patterns: Sequence[str] = (), root: str = "root", _sampler=None):
        """patterns: the triggers of a lazy grammar (none: the grammar holds from the first token)."""
        self._vocab = vocab
        if _sampler is not None:
            self._smpl = _sampler
            return
        if patterns:
            keep = [p.encode() for p in patterns]
            array = (ctypes.c_char_p * len(keep))(*keep)
            self._smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, gbnf.encode(), root.encode(), array, len(keep), None, 0
            )
        else:  # not lazy: constrained from the first token
            self._smpl = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), root.encode())
        if not self._smpl:
            raise GrammarError("llama.cpp could not parse the tool-call grammar")

    def clone(self) -> Grammar:
        return Grammar(self._vocab, _sampler=llama_cpp.llama_sampler_clone(self._smpl))

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._smpl, token)

    def allows(self, token: int) -> bool:
        """token may come next (a one-token candidate list: cheap, unlike mask())."""
        data = np.zeros(1, _TOKEN_DATA)
        data["id"], data["logit"] = token, 0.0
        self._apply(data)
        return bool(np.isfinite(data["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of one row of logits with the tokens the grammar forbids at -inf."""
        data = np.zeros(len(logits), _TOKEN_DATA)
        data["id"] = np.arange(len(logits), dtype=np.int32)
        data["logit"] = logits
        self._apply(data)
        return data["logit"].copy()

    def mask_ids(self, logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The logits of ids (a candidate set) with those the grammar forbids at -inf."""
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

    def close(self) -> None:
        if self._smpl:
            llama_cpp.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self):
        self.close()
