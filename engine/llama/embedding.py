"""An embedding model's llama.cpp context: texts in, one pooled vector per text out.

Loaded like a target model (engine/llama/runner.py): the same backends, the whole model on the
GPU where one is in use and it fits, the engine's CPU weight placement (never llama.cpp's AMX
path, which crashes on batches: cpu_weights), llama.cpp's log kept for the reason of a failure.
The context is created with embeddings on and the pooling the file declares (mean, CLS or last
token); a file that pools nothing (a chat model) or ranks (a reranker) is refused after loading,
before anything is decoded.

Native code aborts the process on some inputs rather than returning an error, so every batch is
shaped here before llama.cpp sees it:
  - a text is cut to the model's trained context (an encoder's position table ends there) and
    to the batch, keeping its closing special token ([SEP], EOS);
  - an encoder needs each sequence whole inside one micro-batch, so n_batch == n_ubatch and a
    batch never holds more tokens than that;
  - sequence ids stay below n_seq_max; an empty token list is never sent.

One owner thread: not thread-safe (llama.cpp contexts are not).
"""

from __future__ import annotations

import ctypes
import os

import llama_cpp
import numpy as np

from engine.config import GPU_LAYERS_ALL, GPU_LAYERS_AUTO
from engine.errors import EngineError, ModelLoadError
from engine.gguf.header import GGUFInfo, read_header
from engine.llama import backends, cpu_weights, offload
from engine.llama import log as llama_log
from engine.llama.runner import _init_backend, _load_failure, default_threads

MAX_TOKENS = 512  # longest text embedded, in tokens (less where the model was trained on less)
# Tokens per decode: several short texts share one, a long one fills it alone. Larger batches cost
# attention across the whole batch (masked, but computed): all-MiniLM-L6-v2 F16 on one core of this
# 2-core CPU embedded 14.7 licence passages per CPU-second at 512, 12.8 at 1024, 9.1 at 2048.
BATCH_TOKENS = 512
MAX_SEQUENCES = 64  # texts per decode
POOLING_NAMES = {
    llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama_cpp.LLAMA_POOLING_TYPE_CLS: "CLS",
    llama_cpp.LLAMA_POOLING_TYPE_LAST: "last token",
}


class EmbeddingError(EngineError):
    """llama.cpp could not compute embeddings for a batch."""

    hint = "What was stored so far is kept; try again, or choose another embedding model."


class EmbeddingRunner:
    """A loaded embedding model with its context. Not thread-safe: one owner thread.

    path: a GGUF file; n_gpu_layers as in ModelSpec (auto: the whole model on the GPU when it fits
    in free memory, else the CPU: a split buys nothing for a model this small).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        n_threads: int | None = None,
        n_gpu_layers: int = GPU_LAYERS_AUTO,
        allow_amx: bool = False,
        max_tokens: int = MAX_TOKENS,
        batch_tokens: int = BATCH_TOKENS,
    ):
        _init_backend()
        self._model = self._ctx = self._batch = None  # before anything can fail: close() runs on error
        self.path = os.fspath(path)
        self.info: GGUFInfo = read_header(self.path)  # clear errors for non-GGUF / truncated files
        mark = llama_log.mark()
        trained = self.info.context_length or max_tokens
        self.max_tokens = max(min(max_tokens, trained), 8)
        self.n_batch = max(batch_tokens, self.max_tokens)

        mparams = llama_cpp.llama_model_default_params()
        self.gpu_layers = self._gpu_layers_for(n_gpu_layers)
        mparams.n_gpu_layers = self.gpu_layers
        if self.gpu_layers == 0:
            # As the runner does: no devices at all, or llama.cpp still sends CPU weights through the GPU.
            self._no_devices = (ctypes.c_void_p * 1)()
            mparams.devices = ctypes.cast(self._no_devices, ctypes.c_void_p)
        self.weights = cpu_weights.plan(self.info.tensors, self.info.n_layers or 0, self.gpu_layers, allow_amx)
        keep_alive = cpu_weights.apply(self.weights, mparams)  # noqa: F841 - read by llama.cpp during the load
        self._model = llama_cpp.llama_model_load_from_file(os.fsencode(self.path), mparams)
        if not self._model:
            raise _load_failure(self.path, llama_log.errors_since(mark))
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_embd = llama_cpp.llama_model_n_embd(self._model)

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.n_batch
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch  # an encoder's sequence must fit one micro-batch whole
        cparams.n_seq_max = MAX_SEQUENCES
        cparams.kv_unified = True  # a causal embedder's sequences share the cache (each is short)
        cparams.embeddings = True
        cparams.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED  # the file's own
        self.n_threads = n_threads or default_threads()
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            reason = llama_log.errors_since(mark) or "out of memory?"
            self.close()
            error = ModelLoadError(
                f"Could not create an embedding context for {os.path.basename(self.path)}: {reason}."
            )
            error.out_of_memory = True
            raise error
        pooling = llama_cpp.llama_pooling_type(self._ctx)
        if pooling not in POOLING_NAMES:
            self.close()
            what = "ranks passages (a reranker)" if pooling == llama_cpp.LLAMA_POOLING_TYPE_RANK else "pools no vector"
            raise ModelLoadError(
                f"{os.path.basename(self.path)} {what}: it is not an embedding model.",
                hint="Choose an embedding model GGUF, such as nomic-embed-text-v1.5 or all-MiniLM-L6-v2.",
            )
        self.pooling = POOLING_NAMES[pooling]
        self._memory = llama_cpp.llama_get_memory(self._ctx)  # None for an encoder (BERT): nothing to clear
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.backend = backends.ensure_loaded().gpu.backend if self.gpu_layers else "CPU"

    def _gpu_layers_for(self, requested: int) -> int:
        gpu = backends.ensure_loaded().gpu
        if gpu is None or not llama_cpp.llama_supports_gpu_offload() or requested == 0:
            return 0
        costs = offload.layer_costs(self.info, self.n_batch, self.n_batch)
        if requested == GPU_LAYERS_ALL:
            return costs.all_layers
        if requested != GPU_LAYERS_AUTO:
            return min(requested, costs.all_layers)
        free = backends.current().gpu.free_bytes
        fits = costs.bytes_for(costs.all_layers) <= free - offload.reserve(free)
        return costs.all_layers if fits else 0

    # -- tokens -----------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The text's tokens with the model's special tokens ([CLS] … [SEP]), cut to max_tokens;
        special-token text in the input ("[SEP]") is read as plain text."""
        data = text.encode("utf-8", errors="replace")
        n_max = len(data) + 16
        for _ in range(2):
            buffer = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buffer, n_max, True, False)
            if n >= 0:
                tokens = list(buffer[:n])
                break
            n_max = -n
        else:
            raise EmbeddingError(f"The text could not be tokenized ({len(data)} bytes).")
        if len(tokens) > self.max_tokens:
            last = tokens[-1]
            closing = llama_cpp.llama_vocab_get_attr(self.vocab, last) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
            tokens = tokens[: self.max_tokens - 1] + [last] if closing else tokens[: self.max_tokens]
        return tokens

    # -- vectors ----------------------------------------------------------------------------

    def embed_tokens(self, sequences: list[list[int]]) -> np.ndarray:
        """One pooled vector per token sequence (as the model gives it, not normalised), float32
        (len(sequences), n_embd). A sequence longer than max_tokens is cut; an empty one is zeros."""
        out = np.zeros((len(sequences), self.n_embd), dtype=np.float32)
        group: list[int] = []
        used = 0
        for i, tokens in enumerate(sequences):
            n = min(len(tokens), self.max_tokens)
            if n == 0:
                continue
            if group and (used + n > self.n_batch or len(group) == MAX_SEQUENCES):
                self._embed_group(sequences, group, out)
                group, used = [], 0
            group.append(i)
            used += n
        if group:
            self._embed_group(sequences, group, out)
        return out

    def _embed_group(self, sequences: list[list[int]], group: list[int], out: np.ndarray) -> None:
        batch = self._batch
        n = 0
        for seq, i in enumerate(group):
            for pos, token in enumerate(sequences[i][: self.max_tokens]):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = True
                n += 1
        assert 0 < n <= self.n_batch and len(group) <= MAX_SEQUENCES  # past these llama.cpp aborts
        batch.n_tokens = n
        if self._memory:
            llama_cpp.llama_memory_clear(self._memory, True)
            rc = llama_cpp.llama_decode(self._ctx, batch)
        else:
            rc = llama_cpp.llama_encode(self._ctx, batch)
        if rc != 0:
            raise EmbeddingError(f"llama.cpp could not embed a batch of {len(group)} texts (error {rc}).")
        for seq, i in enumerate(group):
            pointer = llama_cpp.llama_get_embeddings_seq(self._ctx, seq)
            if not pointer:
                raise EmbeddingError("llama.cpp returned no pooled vector.")
            out[i] = np.ctypeslib.as_array(pointer, shape=(self.n_embd,))

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        self.close()
