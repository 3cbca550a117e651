"""What a context's memory can forget, and state checkpoints for memories that cannot.

An attention KV cache can drop any suffix, so rolling back rejected drafts or going back to an
earlier turn is one `llama_memory_seq_rm`. A recurrent state (Mamba, RWKV, the linear-attention
layers of Qwen3.5/3.6, LFM2, Granite 4.0-H, Falcon-H1, Nemotron-H) holds only "now": llama.cpp
refuses a partial erase there and says so by returning false. For those models the runner keeps
checkpoints, copies of the recurrent state at known token positions (the attention part of a
hybrid is still trimmed by seq_rm), and goes back to the nearest one at or before where the cache
must end, re-evaluating the rest (llama-server's context checkpoints work the same way).

Two kinds are kept: TURN checkpoints at the end of each prompt (regenerate, edit and the next
turn start from them) and ROUND checkpoints just before a speculative batch (a rejected draft
goes back to one), a few of each and within a memory budget.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from enum import Enum

import llama_cpp
import numpy as np


class MemoryKind(str, Enum):
    """How a model remembers the context, as llama.cpp reports it at load."""

    KV = "kv"  # attention only: any suffix can be erased
    SWA = "swa"  # sliding-window attention, the whole window kept (swa_full): as erasable as KV
    HYBRID = "hybrid"  # attention layers and recurrent layers
    RECURRENT = "recurrent"  # a recurrent state only (Mamba, RWKV)

    @property
    def needs_checkpoints(self) -> bool:
        return self in (MemoryKind.HYBRID, MemoryKind.RECURRENT)

    @property
    def label(self) -> str:
        return {
            MemoryKind.KV: "attention KV cache",
            MemoryKind.SWA: "sliding-window attention (whole window kept)",
            MemoryKind.HYBRID: "hybrid: attention + recurrent state",
            MemoryKind.RECURRENT: "recurrent state",
        }[self]


class CheckpointKind(str, Enum):
    TURN = "turn"  # the end of a prompt
    ROUND = "round"  # before a speculative batch


# How many of each kind are kept (the newest win), and the most memory they may take together.
KEEP = {CheckpointKind.TURN: 8, CheckpointKind.ROUND: 2}
DEFAULT_BUDGET_BYTES = 1 << 30
# The flag that asks a hybrid memory for its recurrent part only (a pure recurrent one ignores it).
_PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


def memory_kind(model, sliding_window: int | None) -> MemoryKind:
    if llama_cpp.llama_model_is_hybrid(model):
        return MemoryKind.HYBRID
    if llama_cpp.llama_model_is_recurrent(model):
        return MemoryKind.RECURRENT
    return MemoryKind.SWA if sliding_window else MemoryKind.KV


@dataclass(eq=False)  # identity: two checkpoints are never the same one
class Checkpoint:
    tokens: np.ndarray  # the tokens the saved state holds (positions 0..n-1)
    state: ctypes.Array
    kind: CheckpointKind
    hidden: np.ndarray | None = None  # the target's hidden state at position n-1, for an MTP head

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return len(self.state) + (self.hidden.nbytes if self.hidden is not None else 0)

    def holds_prefix_of(self, tokens: np.ndarray) -> bool:
        n = len(self.tokens)
        return n <= len(tokens) and bool(np.array_equal(self.tokens, tokens[:n]))


@dataclass
class CheckpointCounters:
    saved: int = 0
    restored: int = 0  # rollbacks served by a checkpoint
    cleared: int = 0  # rollbacks that found none and started from an empty context
    save_s: float = 0.0
    restore_s: float = 0.0


@dataclass
class Checkpoints:
    """The checkpoints of one context's sequence 0."""

    ctx: object
    budget_bytes: int = field(default_factory=lambda: DEFAULT_BUDGET_BYTES)  # read at load: a setting
    items: list[Checkpoint] = field(default_factory=list)
    counters: CheckpointCounters = field(default_factory=CheckpointCounters)

    def state_bytes(self) -> int:
        """The size of one checkpoint now (0: llama.cpp cannot save this memory)."""
        return int(llama_cpp.llama_state_seq_get_size_ext(self.ctx, 0, _PARTIAL))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.items)

    def save(self, cached: list[int], kind: CheckpointKind, hidden: np.ndarray | None = None) -> bool:
        """Copy the state as it is now, holding `cached`. False: llama.cpp could not."""
        tokens = np.asarray(cached, dtype=np.int32)
        for c in self.items:
            if len(c) == len(tokens) and c.holds_prefix_of(tokens):
                if kind == CheckpointKind.TURN:
                    c.kind = kind  # a round's state that turns out to be a prompt's end
                return True  # the same state is already kept
        t0 = time.perf_counter()
        size = self.state_bytes()
        if size <= 0:
            return False
        state = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data_ext(self.ctx, state, size, 0, _PARTIAL)
        if written != size:
            return False
        self.items.append(Checkpoint(tokens, state, kind, hidden))
        self.counters.saved += 1
        self.counters.save_s += time.perf_counter() - t0
        self._evict()
        return True

    def _evict(self) -> None:
        for kind, keep in KEEP.items():
            of_kind = [c for c in self.items if c.kind == kind]
            for old in of_kind[: max(len(of_kind) - keep, 0)]:
                self.items.remove(old)
        while self.items and self.nbytes > self.budget_bytes:
            self.items.pop(0)

    def best(self, cached: list[int], n: int) -> Checkpoint | None:
        """The longest checkpoint that holds a prefix of cached[:n]."""
        tokens = np.asarray(cached[:n], dtype=np.int32)
        fitting = [c for c in self.items if c.holds_prefix_of(tokens)]
        return max(fitting, key=len, default=None)

    def restore(self, checkpoint: Checkpoint) -> bool:
        """Put the saved state back (the recurrent part of a hybrid; its attention part is the caller's)."""
        t0 = time.perf_counter()
        size = len(checkpoint.state)
        read = llama_cpp.llama_state_seq_set_data_ext(self.ctx, checkpoint.state, size, 0, _PARTIAL)
        self.counters.restore_s += time.perf_counter() - t0
        if read != size:
            self.items.remove(checkpoint)
            return False
        self.counters.restored += 1
        return True

    def clear(self) -> None:
        self.items.clear()
