"""One GGUF model and its llama.cpp context: tokenize, decode with KV reuse, read logits.

The runner keeps the list of tokens its KV cache holds, so callers just say "evaluate this
sequence": the common prefix with the cache is reused, anything after it is removed, and only
the new tokens are decoded. That single rule serves prompt prefill, follow-up turns, draft
steps, rolling back rejected drafts and editing an earlier message.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np

from engine.config import ModelSpec
from engine.errors import ContextFullError, DecodeError, ModelLoadError
from engine.gguf.header import GGUFInfo, read_header
from engine.llama import backends, cpu_weights, offload
from engine.llama import log as llama_log
from engine.llama.grammar import VocabPieces
from engine.llama.memory import (
    Checkpoint,
    CheckpointCounters,
    CheckpointKind,
    Checkpoints,
    MemoryKind,
    memory_kind,
)
from engine.llama.mtp import MtpHead

_backend_ready = False
# Decodes of more tokens than this (prompt chunks) can be interrupted mid-way; shorter ones take
# a few tens of milliseconds and the cancel flag is checked before each.
ABORTABLE_BATCH = 32
SLOW_DECODE_S = 0.5  # calibration times a decode this slow once, not `repeats` times
CALIBRATION_CONTEXT = 16  # tokens of context the calibration's decodes attend to


class Cancelled(Exception):
    """Decoding was stopped by the cancel flag; the KV cache is consistent."""


def default_threads() -> int:
    """Physical cores, roughly: llama.cpp gains nothing from hyperthreads."""
    try:
        logical = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        logical = os.cpu_count() or 1
    return logical if logical <= 4 else logical // 2


def backend_name() -> str:
    """The GPU backend in use ("Vulkan", "CUDA", "Metal"...), or CPU when there is no GPU."""
    gpu = backends.ensure_loaded().gpu
    return gpu.backend if gpu is not None else "CPU"


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(np.argmax(x))


def memory_of_file(path: str) -> MemoryKind:
    """How the model in a GGUF file remembers the context, without loading its weights."""
    _init_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True  # the architecture and hyperparameters, no tensors
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise _load_failure(path, "")
    try:
        return memory_kind(model, read_header(path).sliding_window)
    finally:
        llama_cpp.llama_model_free(model)


def _init_backend() -> None:
    global _backend_ready
    llama_log.install()
    if not _backend_ready:
        backends.ensure_loaded()  # before llama.cpp looks for devices
        llama_cpp.llama_backend_init()
        _backend_ready = True


# llama.cpp's words for running out of memory; any other load failure is about the file itself.
_MEMORY_WORDS = re.compile(r"alloc|out of memory|not enough memory", re.I)
FILE_HINT = (
    "The file may be damaged or made for another version of llama.cpp: choose another GGUF file, or download it again."
)


def _load_failure(path: str, reason: str) -> ModelLoadError:
    """The error for a model llama.cpp refused, with advice that fits the reason."""
    name = os.path.basename(path)
    if reason and _MEMORY_WORDS.search(reason):
        error = ModelLoadError(f"Could not load {name}: {reason}.")  # the default hint: fewer layers, smaller
        error.out_of_memory = True
        return error
    return ModelLoadError(f"Could not load {name}: {reason or 'llama.cpp refused the file'}.", hint=FILE_HINT)


class ModelRunner:
    """A loaded model with one sequence of KV cache. Not thread-safe: one owner thread."""

    def __init__(self, spec: ModelSpec, progress: Callable[[float], None] | None = None, n_rs_seq: int = 0):
        """n_rs_seq: llama.cpp's experimental per-token recurrent snapshots, for bench_memory's
        comparison only: the engine keeps checkpoints instead (README: Hybrid and recurrent models)."""
        _init_backend()
        self._model = self._ctx = self._batch = self.mtp = None  # before anything can fail: close() runs on error
        self.spec = spec
        self.info: GGUFInfo = read_header(spec.path)  # clear errors for non-GGUF / truncated files
        self.cancel_event: threading.Event | None = None
        mark = llama_log.mark()

        mparams = llama_cpp.llama_model_default_params()
        n_gpu_layers = self._gpu_layers_for(spec)
        mparams.n_gpu_layers = n_gpu_layers
        if n_gpu_layers == 0:
            # No device list at all, not just no layers: otherwise llama.cpp still sends large
            # batches of CPU weights through the GPU ("op offload") and keeps buffers there.
            self._no_devices = (ctypes.c_void_p * 1)()
            mparams.devices = ctypes.cast(self._no_devices, ctypes.c_void_p)
        # The MTP layers are skipped at load unless asked for (llama.cpp's load_mtp).
        mparams.load_mtp = bool(spec.mtp and self.info.nextn_layers)
        self.weights = cpu_weights.plan(self.info.tensors, self.info.n_layers or 0, n_gpu_layers, spec.allow_amx)
        keep_alive = cpu_weights.apply(self.weights, mparams)  # noqa: F841 - read by llama.cpp during the load
        if progress is not None:
            # Keep the ctypes callback alive as long as the load runs. A progress function that
            # returns False abandons the load (llama.cpp then returns no model): how a load is cancelled.
            self._progress_cb = llama_cpp.llama_progress_callback(lambda p, _d: progress(p) is not False)
            mparams.progress_callback = self._progress_cb
        self._model = llama_cpp.llama_model_load_from_file(os.fsencode(spec.path), mparams)
        if not self._model:
            raise _load_failure(spec.path, llama_log.errors_since(mark))
        self.weight_buffers = llama_log.buffer_sizes(mark)  # e.g. {"CPU_REPACK": 812.0} (MiB)
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)

        self.n_threads = spec.n_threads or default_threads()
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = spec.n_ctx
        cparams.n_batch = spec.n_batch
        cparams.n_ubatch = spec.n_batch
        cparams.n_seq_max = 1
        cparams.n_rs_seq = n_rs_seq
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        # Checked by llama.cpp between graph nodes, so a cancel interrupts even a long prompt. It is
        # armed only for long batches (see _decode): hundreds of Python calls per decode cost ~3%.
        self._abort_cb = llama_cpp.ggml_abort_callback(self._should_abort)
        self._abort_armed = False
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            reason = llama_log.errors_since(mark) or "out of memory?"
            self.close()
            error = ModelLoadError(
                f"Could not create a {spec.n_ctx}-token context for {os.path.basename(spec.path)}: {reason}."
            )
            error.out_of_memory = True  # the KV cache and compute buffers are all a context allocates
            raise error
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        # llama.cpp clamps the batch to the context size; decoding more at once aborts the process.
        self.n_batch = min(llama_cpp.llama_n_batch(self._ctx), llama_cpp.llama_n_ubatch(self._ctx))
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.n_layers = llama_cpp.llama_model_n_layer(self._model)
        self.memory = memory_kind(self._model, self.info.sliding_window)
        self.checkpoints = Checkpoints(self._ctx)
        self.last_decoded = 0  # tokens the latest eval decoded (the rest came from the cache)
        offloaded = llama_log.offloaded_layers(mark)  # what llama.cpp says it did, when it says so
        if offloaded:
            self.gpu_layers = offloaded[0]
        elif llama_cpp.llama_supports_gpu_offload():
            self.gpu_layers = min(n_gpu_layers, self.n_layers + 1)  # + the output layer
        else:
            self.gpu_layers = 0
        self.backend = backend_name() if self.gpu_layers else "CPU"
        self.cached: list[int] = []  # tokens whose K/V the context holds, positions 0..n-1
        self.mtp_problem = ""  # why a file's MTP layers are not used ("" when they are, or there are none)
        if self.info.nextn_layers:
            self._open_mtp(spec)
        self._eog: dict[int, bool] = {}
        self.bos_id = llama_cpp.llama_vocab_bos(self.vocab)
        # Why drafts could not be rolled back on this model (None: they can); see check_rollback.
        self.rollback_problem: str | None = self.check_rollback() if self.memory.needs_checkpoints else None

    def _open_mtp(self, spec: ModelSpec) -> None:
        if not spec.mtp:
            self.mtp_problem = "its MTP layers were not loaded (Settings → Models)"
            return
        if llama_cpp.llama_model_n_layer_nextn(self._model) != 1:
            self.mtp_problem = "only single-head MTP (Qwen3.5/3.6) is supported"
            return
        try:
            self.mtp = MtpHead(self._model, self._ctx, self.n_ctx, self.n_batch, self.n_threads)
        except DecodeError as error:
            self.mtp_problem = str(error)

    def _gpu_layers_for(self, spec: ModelSpec) -> int:
        """spec.n_gpu_layers as llama.cpp takes it: "all" and "auto" resolved (auto: what fits alone)."""
        gpu = backends.ensure_loaded().gpu
        if gpu is None:
            return 0
        n_layers = self.info.n_layers or 0
        if spec.n_gpu_layers == offload.GPU_LAYERS_AUTO:
            costs = offload.layer_costs(self.info, spec.n_ctx, spec.n_batch)
            free = backends.current().gpu.free_bytes
            return offload.plan(costs, offload.GPU_LAYERS_AUTO, None, 0, free).target_layers
        if spec.n_gpu_layers < 0:
            return n_layers + 1
        return min(spec.n_gpu_layers, n_layers + 1)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        if self.mtp is not None:
            self.mtp.close()  # before the target's context, which it points to
            self.mtp = None
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

    @property
    def model_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model)) if self._model else 0

    @property
    def context_bytes(self) -> int:
        own = int(llama_cpp.llama_state_get_size(self._ctx)) if self._ctx else 0
        return own + (self.mtp.context_bytes if self.mtp is not None else 0)

    def _arm_abort(self, armed: bool) -> None:
        if armed != self._abort_armed:
            llama_cpp.llama_set_abort_callback(
                self._ctx, self._abort_cb if armed else llama_cpp.ggml_abort_callback(), None
            )
            self._abort_armed = armed

    def _should_abort(self, _data) -> bool:
        return self.cancel_event is not None and self.cancel_event.is_set()

    # -- text ------------------------------------------------------------------------------

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """Tokenize formatted chat text: special tokens (<|im_start|>) parsed, BOS added once."""
        data = text.encode("utf-8")
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), True, special)
        if n < 0:
            buf = (llama_cpp.llama_token * -n)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), True, special)
        tokens = list(buf[:n])
        if len(tokens) >= 2 and tokens[0] == tokens[1] == self.bos_id:
            tokens.pop(0)  # the chat template already wrote the BOS text
        return tokens

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens render as nothing)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    @functools.cached_property
    def grammar_pieces(self) -> VocabPieces:
        """The vocabulary as grammars see it (built on first use: only tool chats need it)."""
        return VocabPieces(self.vocab)

    def token_text(self, token: int) -> str:
        """The vocabulary's text for a token id, as stored (for compatibility checks)."""
        return llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="surrogateescape")

    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, <|im_end|>...): asked of llama.cpp once per token id."""
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return known

    @property
    def eog_ids(self) -> frozenset[int]:
        return frozenset(t for t in range(self.n_vocab) if self.is_eog(t))

    # -- decoding --------------------------------------------------------------------------

    def truncate(self, n: int) -> int:
        """Forget everything from position n on; returns how many tokens the cache now holds.

        That is n, except on a recurrent memory, which cannot erase a suffix: there the nearest
        checkpoint at or before n is restored (fewer tokens), or, with none, the context is
        emptied (0). The cache never holds a state that self.cached does not describe.
        """
        if n < len(self.cached):
            self._forget_from(n)
        return len(self.cached)

    def _forget_from(self, n: int) -> None:
        """Erase positions n.. from the memory (beyond self.cached too: what a failed decode left)."""
        if llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
            del self.cached[n:]
        else:
            # A recurrent state refuses a partial erase (llama.cpp returns false and changes nothing).
            checkpoint = self.checkpoints.best(self.cached, n)
            if checkpoint is None or not self._restore(checkpoint):
                self.checkpoints.counters.cleared += 1
                self._clear()
        if self.mtp is not None:
            self.mtp.forget_from(len(self.cached))

    def _restore(self, checkpoint: Checkpoint) -> bool:
        """Back to a checkpoint: its recurrent state, then the attention part trimmed to match."""
        if not self.checkpoints.restore(checkpoint):
            return False
        n = len(checkpoint)
        if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
            return False
        del self.cached[n:]
        if self.mtp is not None and checkpoint.hidden is not None:
            self.mtp.remember(n - 1, checkpoint.hidden)
        return True

    def _clear(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.cached.clear()
        if self.mtp is not None:
            self.mtp.forget_from(0)

    def check_rollback(self) -> str | None:
        """Whether a checkpoint of this model's state can be kept and restored (None: it can).

        Evaluates a few tokens, keeps a checkpoint, evaluates more and goes back to it: what
        every rejected draft will do. Speculation is off for a model that fails this.
        """
        probe = [min(100 + i, self.n_vocab - 1) for i in range(6)]
        try:
            self.eval(probe[:4], 0, checkpoint=CheckpointKind.ROUND)
            size = self.checkpoints.state_bytes()
            if size > self.checkpoints.budget_bytes:
                return f"its recurrent state ({size / 1e6:,.1f} MB) is larger than the memory allowed for checkpoints"
            if not self.checkpoints.items:
                return "llama.cpp could not save this model's recurrent state"
            self.eval(probe, 1)
            if self.truncate(4) != 4:
                return "llama.cpp could not restore this model's recurrent state"
            return None
        except Exception as error:  # noqa: BLE001 - any failure here means: no rollback
            return f"saving this model's recurrent state failed ({error})"
        finally:
            self.reset()
            self.checkpoints.counters = CheckpointCounters()

    def reset(self) -> None:
        """An empty context, and no checkpoints: start from nothing."""
        self._clear()
        self.checkpoints.clear()

    def eval(
        self,
        tokens: Sequence[int],
        n_logits: int = 1,
        checkpoint: CheckpointKind | None = None,
        width: int = 0,
    ) -> np.ndarray | None:
        """Make the cache hold `tokens` and return the logits of the last n_logits positions.

        The result has shape (n_logits, n_vocab) and is a view into llama.cpp's buffer: valid
        until the next eval. checkpoint: on a recurrent memory, keep a checkpoint of the state
        just before the last n_logits tokens (the end, with none), so that going back there later
        costs no re-evaluation. width: decode those last n_logits tokens as a batch of this many,
        padded (see can_pad; ignored where it cannot). Raises ContextFullError, DecodeError, or
        Cancelled; in every case the cache still matches self.cached.
        """
        n = len(tokens)
        if n > self.n_ctx:
            raise ContextFullError(f"The conversation needs {n} tokens but the context holds {self.n_ctx}.")
        head_end = n - n_logits
        start = self.truncate(min(common_prefix(self.cached, tokens), head_end))
        if (
            self.mtp is not None
            and start > 0
            and self.mtp.hidden_at(start - 1) is None
            and not self.memory.needs_checkpoints
        ):
            # The MTP head pairs the first new token with the target's hidden state one position
            # earlier; re-evaluating that one token brings it back (a recurrent memory's checkpoints keep it).
            start = self.truncate(start - 1)
        self.last_decoded = n - start
        for begin in range(start, head_end, self.n_batch):  # prefill without logits
            self._decode(tokens, begin, min(begin + self.n_batch, head_end), want_logits=False)
        if checkpoint is not None and self.memory.needs_checkpoints and self.cached:
            hidden = self.mtp.hidden_at(len(self.cached) - 1) if self.mtp is not None else None
            self.checkpoints.save(self.cached, checkpoint, hidden)
        if n_logits == 0:
            return None
        self._decode(tokens, head_end, n, want_logits=True, width=width)
        ptr = llama_cpp.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_logits, self.n_vocab))

    @property
    def can_pad(self) -> bool:
        """Whether a decode may carry throwaway tokens after the real ones (eval's width).

        On some machines a wider batch costs less than a narrower one (a CPU's matrix kernels work
        in tiles of 16 rows: 16 tokens can cost less than 14), so a verification is cheapest padded
        to the width the CostModel finds cheaper. The padding comes after the real tokens, so
        attention keeps them from changing the real tokens' results, and its cells are erased at
        once. Not on a recurrent memory, whose state would take the padding in, nor with an MTP head,
        which follows every decoded token's hidden state.
        """
        return not self.memory.needs_checkpoints and self.mtp is None

    def _decode(self, tokens: Sequence[int], start: int, end: int, want_logits: bool, width: int = 0) -> None:
        if self.cancel_event is not None and self.cancel_event.is_set():
            raise Cancelled()
        batch = self._batch
        count = end - start
        for i in range(count):
            batch.token[i] = tokens[start + i]
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = want_logits
        fits = count < width <= self.n_batch and end + width - count <= self.n_ctx
        padding = width - count if fits and self.can_pad else 0
        for i in range(count, count + padding):  # the last token again, at the following positions
            batch.token[i] = tokens[end - 1]
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = False
        batch.n_tokens = count + padding
        self._arm_abort(count > ABORTABLE_BATCH)
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc != 0:
            # Drop whatever a failed or aborted call left behind, so the cache matches self.cached
            # (a recurrent state that went on goes back to a checkpoint, or starts again empty).
            self._forget_from(len(self.cached))
            if rc == 2:
                raise Cancelled()
            if rc == 1:
                raise ContextFullError(f"No room in the {self.n_ctx}-token context for {count} more tokens.")
            raise DecodeError(f"llama_decode failed (code {rc}) at position {start}.")
        if padding:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, end, -1)
        self.cached.extend(tokens[start:end])
        if self.mtp is not None:
            self.mtp.follow(tokens, start, end)  # the head's cache follows the target's

    def time_decodes(
        self, sizes: Sequence[int], repeats: int = 2, context_tokens: int = CALIBRATION_CONTEXT
    ) -> dict[int, float]:
        """Median seconds for one decode of n tokens after context_tokens, for each n in sizes (calibration).

        The context is evaluated once; each size then gets one warm-up (a first call of a
        new size allocates) and `repeats` timed decodes, each rolled back before the next. On a
        slow device (a decode over SLOW_DECODE_S) one timed decode is precise enough, and
        repeating would make loading take minutes.
        """
        context = [min(1000 + i % 1000, self.n_vocab - 1) for i in range(context_tokens)]
        filler = [min(2000 + i, self.n_vocab - 1) for i in range(max(sizes))]
        self.eval(context, 0, checkpoint=CheckpointKind.ROUND)  # a recurrent state goes back to it
        result = {}
        for n in sizes:
            times: list[float] = []
            for attempt in range(repeats + 1):
                t0 = time.perf_counter()
                self.eval(context + filler[:n], n)
                elapsed = time.perf_counter() - t0
                self.truncate(len(context))
                if attempt:
                    times.append(elapsed)
                    if elapsed > SLOW_DECODE_S:
                        break
            result[n] = float(np.median(times))
        self.reset()
        return result

    def time_mtp_step(self, repeats: int = 3) -> float | None:
        """Median seconds of one MTP head step (None without a head); the first, which allocates, is not counted."""
        if self.mtp is None:
            return None
        context = [min(1000 + i, self.n_vocab - 1) for i in range(16)]
        self.eval(context, 0)
        times = []
        try:
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                self.mtp.step(context[-1], len(context), None)
                times.append(time.perf_counter() - t0)
                self.mtp.forget_from(len(context))
        except DecodeError:
            return None  # the head failed (self.mtp.problem says why): it will not be offered
        finally:
            self.reset()
        return float(np.median(times[1:]))

    def time_rollback(self) -> float:
        """Seconds a rolled-back draft costs beyond its verification: keeping a checkpoint before the
        batch and restoring it after (0 on a memory that erases a suffix in place)."""
        if not self.memory.needs_checkpoints or self.rollback_problem:
            return 0.0
        counters = self.checkpoints.counters
        before = (counters.save_s, counters.restore_s, counters.saved, counters.restored)
        context = [min(1000 + i, self.n_vocab - 1) for i in range(16)]
        self.eval(context, 0, checkpoint=CheckpointKind.TURN)  # where each try below starts (kept through them)
        for i in range(3):
            self.eval(context + [i], 0, checkpoint=CheckpointKind.ROUND)  # a new state each time
            self.eval(context + [i, 1, 2], 1)
            self.truncate(len(context) + 1)
        saves = counters.saved - before[2]
        restores = counters.restored - before[3]
        seconds = (counters.save_s - before[0]) / max(saves, 1) + (counters.restore_s - before[1]) / max(restores, 1)
        self.reset()
        return seconds
