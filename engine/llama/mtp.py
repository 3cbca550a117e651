"""A model's own next-token-prediction (MTP) head, drafting for it with no draft file.

Qwen3.5/3.6, Qwen3-Next, GLM-4.5 and Step-3.5 GGUFs can carry MTP layers (`<arch>.nextn_predict_layers`):
a small block that takes a token and the target's hidden state at the position before it and
predicts the token after it. llama.cpp runs it in a context of its own (LLAMA_CONTEXT_TYPE_MTP)
with a KV cache of its own, which must follow the target's: after every target decode the head
decodes the same tokens, each paired with the target's hidden state one position earlier (common/
speculative.cpp's draft-mtp does the same in `process`). To draft, it starts from the last
committed token and the target's hidden state before it, and feeds its own hidden state forward
one token at a time.

Only single-head models (Qwen3.5/3.6) are driven here; llama.cpp's chained heads (Step-3.5) and
shared-memory assistants (Gemma 4) are not.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from engine.errors import DecodeError


class MtpHead:
    """The MTP context of one loaded target; the target's runner calls follow() and forget_from()."""

    def __init__(self, model, target_ctx, n_ctx: int, n_batch: int, n_threads: int):
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n_ctx, n_batch, n_batch, 1
        params.n_threads = params.n_threads_batch = n_threads
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target_ctx
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            raise DecodeError("llama.cpp could not create the MTP head's context.")
        self._target = target_ctx
        # The target reports its hidden state for every token it decodes (unmasked), the head only
        # for the tokens it is asked to output (masked).
        llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)
        llama_cpp_ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self.n_embd = llama_cpp.llama_model_n_embd_out(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self._ctx)
        self.length = 0  # the head's KV holds positions 0..length-1, following the target's cache
        self._hidden: dict[int, np.ndarray] = {}  # position -> the target's hidden state there (recent ones)
        self.problem: str | None = None  # set when the head failed: it drafts no more
        self.follow_s = 0.0  # time spent following the target (part of every target decode)

    def close(self) -> None:
        if self._batch:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    @property
    def context_bytes(self) -> int:
        return int(llama_cpp.llama_state_get_size(self._ctx)) if self._ctx else 0

    # -- following the target ----------------------------------------------------------------

    def forget_from(self, n: int) -> None:
        """The target's cache now ends at n: so does the head's (its own KV is attention only)."""
        self._hidden = {p: h for p, h in self._hidden.items() if p < n}
        if self.length > n:
            if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
                llama_cpp.llama_memory_clear(self._mem, True)  # never expected for attention; stay consistent
                n = 0
            self.length = n

    def follow(self, tokens: Sequence[int], start: int, end: int) -> None:
        """The target just decoded tokens[start:end]: decode them in the head too, each with the
        target's hidden state one position earlier, and keep the new hidden states."""
        if self.problem is not None:
            return
        t0 = time.perf_counter()
        self.forget_from(start)
        if self.length < start:  # the head missed positions (it failed before): it cannot catch up
            self.problem = "the MTP head lost track of the target's cache"
            return
        rows = np.ctypeslib.as_array(
            llama_cpp_ext.llama_get_embeddings_nextn(self._target), shape=(end - start, self.n_embd)
        )
        rows = rows.copy()
        previous = self._hidden.get(start - 1)
        inputs = np.empty((end - start, self.n_embd), dtype=np.float32)
        inputs[0] = previous if previous is not None else 0.0  # no state before position 0 (llama.cpp uses zeros)
        inputs[1:] = rows[:-1]
        try:
            self._run(tokens[start:end], start, inputs, outputs=False)
        except DecodeError:
            return  # the target's answer goes on; the head drafts no more (self.problem says why)
        self.length = end
        # What the next decode and the next draft need: this batch's rows and the one before it.
        self._hidden = {p: h for p, h in self._hidden.items() if p == start - 1}
        self._hidden.update({start + i: rows[i] for i in range(end - start)})
        self.follow_s += time.perf_counter() - t0

    def hidden_at(self, position: int) -> np.ndarray | None:
        """The target's hidden state at position, if the head still has it (kept with checkpoints)."""
        return self._hidden.get(position)

    def remember(self, position: int, hidden: np.ndarray) -> None:
        """A checkpoint brought the target back to position + 1: its hidden state there comes back too."""
        self._hidden[position] = hidden

    # -- drafting ----------------------------------------------------------------------------

    def can_draft(self, position: int) -> bool:
        """Whether a draft can start at position (the last committed token's, not yet decoded)."""
        return self.problem is None and self.length == position and (position - 1) in self._hidden

    def step(self, token: int, position: int, hidden: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """One draft step: the logits for the token after `token` and the head's own hidden state.

        hidden: the state to pair with token (None: the target's at position - 1). Views into
        llama.cpp's buffers, valid until the next call.
        """
        state = self._hidden[position - 1] if hidden is None else hidden
        self._run([token], position, state[None, :], outputs=True)
        self.length = position + 1
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, 0), shape=(self.n_vocab,))
        own = np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn_ith(self._ctx, 0), shape=(self.n_embd,))
        return logits, own

    def _run(self, tokens: Sequence[int], start: int, inputs: np.ndarray, outputs: bool) -> None:
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        inputs = np.ascontiguousarray(inputs, dtype=np.float32)
        pointer = inputs.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        pos = (llama_cpp.llama_pos * 4)()  # M-RoPE models read 4 (a text token: the position, then zeros)
        row_bytes = self.n_embd * 4
        for i, token in enumerate(tokens):
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, int(token))
            pos[0] = start + i
            llama_cpp.llama_batch_ext_set_pos(batch, idx, pos)
            row = ctypes.cast(ctypes.addressof(pointer.contents) + i * row_bytes, ctypes.POINTER(ctypes.c_float))
            llama_cpp.llama_batch_ext_set_embd_token(batch, idx, llama_cpp.llama_embd(row, 1, self.n_embd))
            if outputs:
                llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if rc != 0:
            self.problem = f"the MTP head's decode failed (code {rc})"
            llama_cpp.llama_memory_seq_rm(self._mem, 0, start, -1)
            self.length = min(self.length, start)
            raise DecodeError(f"The MTP head could not decode at position {start} (code {rc}).")
