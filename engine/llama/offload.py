"""How many layers of the target and of the draft go to the GPU.

"auto" (the default) fits both into the device's free memory, from the GGUF headers alone: each
layer's weights, its share of the KV cache for the context, and the compute buffers. The draft
goes first when it is small next to the target: every draft step is a single-token decode, the
kind a CPU does worst relative to a GPU, so a draft left on the CPU beside a GPU target mostly
costs more than it saves (the cost model measures it either way, and auto stops drafting with a
draft that does not pay).

llama.cpp counts n_gpu_layers from the top: with k layers offloaded, the output layer (the last
"layer", n_layers) and the k - 1 blocks below it live on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.config import GPU_LAYERS_ALL, GPU_LAYERS_AUTO
from engine.gguf.header import GGUFInfo

__all__ = ["GPU_LAYERS_ALL", "GPU_LAYERS_AUTO", "Offload", "LayerCosts", "layer_costs", "plan"]
# Left free on the device for the driver, the desktop and other programs (at least this share of
# what is free, and at least this much).
RESERVE_SHARE = 0.10
RESERVE_MIN = 384 << 20
# A draft is "small" when all of it costs at most this share of the target's full placement.
SMALL_DRAFT_SHARE = 0.34

_BLOCK = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class Offload:
    target_layers: int  # n_gpu_layers for llama.cpp, 0..n_layers + 1
    draft_layers: int
    note: str = ""  # why, in a line, when auto had to leave something on the CPU


@dataclass(frozen=True)
class LayerCosts:
    """Bytes a model needs on the GPU, per offloaded layer, at one context size."""

    blocks: tuple[int, ...]  # weights + KV cache of each repeating block, bottom to top
    output: int  # the output layer (the output matrix, or the tied embedding llama.cpp duplicates)
    compute: int  # compute buffers, needed as soon as anything is offloaded

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def bytes_for(self, n_gpu_layers: int) -> int:
        """Bytes on the GPU when llama.cpp offloads n_gpu_layers (GPU_LAYERS_ALL: all)."""
        k = self.n_layers + 1 if n_gpu_layers < 0 else min(n_gpu_layers, self.n_layers + 1)
        if k == 0:
            return 0
        return self.compute + self.output + sum(self.blocks[self.n_layers - (k - 1) :])

    def most_layers_within(self, budget: int) -> int:
        """The largest n_gpu_layers whose bytes fit in budget."""
        best = 0
        for k in range(1, self.n_layers + 2):
            if self.bytes_for(k) > budget:
                break
            best = k
        return best

    @property
    def all_layers(self) -> int:
        return self.n_layers + 1


def layer_costs(info: GGUFInfo, n_ctx: int, n_batch: int = 512) -> LayerCosts:
    n_layers = info.n_layers or 0
    blocks = [0] * n_layers
    output = embedding = 0
    for tensor in info.tensors:
        m = _BLOCK.match(tensor.name)
        if m and int(m.group(1)) < n_layers:
            blocks[int(m.group(1))] += tensor.n_bytes
        elif tensor.name.startswith("output."):
            output += tensor.n_bytes
        elif tensor.name == "token_embd.weight":
            embedding = tensor.n_bytes
    if not any(t.name == "output.weight" for t in info.tensors):
        output += embedding  # tied embeddings: llama.cpp copies the matrix to the output layer's device
    kv_per_token = info.kv_bytes_per_token() or 0
    kv_per_layer = kv_per_token * n_ctx // max(n_layers, 1)
    return LayerCosts(tuple(b + kv_per_layer for b in blocks), output, _compute_bytes(info, n_ctx, n_batch))


def _compute_bytes(info: GGUFInfo, n_ctx: int, n_batch: int) -> int:
    """llama.cpp's compute buffer, roughly: the logits of a batch, the attention scores of a batch
    against the whole context, and the batch's activations (float32 throughout)."""
    arch = info.architecture
    n_vocab = len(info.tokens) or 32000
    n_embd = int(info.get(f"{arch}.embedding_length") or 4096)
    n_ff = info.get(f"{arch}.feed_forward_length") or 4 * n_embd
    n_ff = max(n_ff) if isinstance(n_ff, list) else int(n_ff)
    n_head = info.get(f"{arch}.attention.head_count") or 32
    n_head = max(n_head) if isinstance(n_head, list) else int(n_head)
    return 4 * n_batch * (n_vocab + n_head * n_ctx + 4 * n_embd + 2 * n_ff)


def reserve(free_bytes: int) -> int:
    return max(RESERVE_MIN, int(free_bytes * RESERVE_SHARE))


def plan(
    target: LayerCosts,
    target_request: int,
    draft: LayerCosts | None,
    draft_request: int,
    free_bytes: int | None,
) -> Offload:
    """Resolve "auto" requests against free device memory; explicit requests are kept as given.

    free_bytes None means no GPU: everything stays on the CPU.
    """
    if free_bytes is None:
        return Offload(0, 0)
    budget = max(free_bytes - reserve(free_bytes), 0)
    fixed_target = _explicit(target, target_request)
    fixed_draft = _explicit(draft, draft_request) if draft else 0
    budget -= target.bytes_for(fixed_target or 0) + (draft.bytes_for(fixed_draft or 0) if draft else 0)
    t_layers, d_layers = fixed_target, fixed_draft
    draft_auto = draft is not None and d_layers is None
    small_draft = draft is not None and draft.bytes_for(-1) <= SMALL_DRAFT_SHARE * target.bytes_for(-1)
    if draft_auto and (small_draft or t_layers is not None):
        d_layers = draft.most_layers_within(budget)
        budget -= draft.bytes_for(d_layers)
    if t_layers is None:
        t_layers = target.most_layers_within(budget)
        budget -= target.bytes_for(t_layers)
    if draft_auto and d_layers is None:
        d_layers = draft.most_layers_within(budget)
    d_layers = d_layers or 0
    return Offload(
        t_layers, d_layers, _note(target, t_layers, draft, d_layers, target_request, draft_request, free_bytes)
    )


def _explicit(costs: LayerCosts, request: int) -> int | None:
    if request == GPU_LAYERS_AUTO:
        return None
    return costs.all_layers if request == GPU_LAYERS_ALL else min(request, costs.all_layers)


def _note(target, t_layers, draft, d_layers, t_request, d_request, free_bytes) -> str:
    short = []
    if t_request == GPU_LAYERS_AUTO and t_layers < target.all_layers:
        short.append(f"target {t_layers}/{target.all_layers} layers")
    if draft is not None and d_request == GPU_LAYERS_AUTO and d_layers < draft.all_layers:
        short.append(f"draft {d_layers}/{draft.all_layers} layers")
    if not short:
        return ""
    return f"{' and '.join(short)} on the GPU: {free_bytes / 2**30:.1f} GiB free is not enough for all"
