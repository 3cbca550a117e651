"""A Qwen3.5 model with a next-token-prediction (MTP) head, from llama.cpp's random-weight fixture.

test-llama-archs writes no MTP layers, so one is added here the way Qwen3.5's GGUF files carry it
(llama.cpp's src/models/qwen35.cpp, load_block_mtp): one more block after the trunk, a
full-attention decoder block (here the weights of the fixture's attention block 1) plus the
`nextn.eh_proj`, `nextn.enorm` and `nextn.hnorm` tensors, `block_count` counting it,
`nextn_predict_layers` = 1 and the recurrent-layer flags extended with a 0 for it. The new
weights are drawn from a seed like the rest of the fixture's.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import numpy as np

from tests import gguf_damage
from tests.gguf_damage import ARRAY, UINT32, Tensor, u32, with_kv

F32 = 0
ALIGNMENT = 32  # GGUF's default (the fixture sets no general.alignment)


# Outputs of the blocks: zero them and a block passes its input through (the residual stream).
_BLOCK_OUTPUTS = ("attn_output.weight", "ffn_down.weight", "ssm_out.weight")


def with_mtp_head(src: Path, dest: Path, seed: int = 3, predictable: bool = False) -> Path:
    """dest: src with an MTP head of random weights (its drafts mostly rejected).

    predictable: instead, every block of the trunk and of the head outputs zero, so the model
    predicts from the current token alone, and the head's input projection keeps just the token's
    embedding: its drafts are the tokens the target itself will choose (accepted at temperature 0).
    """
    layout = gguf_damage.read_layout(src)
    arch = "qwen35"
    n_layer = struct.unpack("<I", layout.kv(f"{arch}.block_count").raw)[0]
    n_embd = struct.unpack("<I", layout.kv(f"{arch}.embedding_length").raw)[0]
    blob = src.read_bytes()[layout.data_start :]
    by_name = {t.name: t for t in layout.tensors}
    sizes = {t.name: _nbytes(t) for t in layout.tensors}

    def weights(name: str, t: Tensor) -> bytes:
        raw = blob[t.offset : t.offset + sizes[t.name]]
        return bytes(len(raw)) if predictable and name.endswith(_BLOCK_OUTPUTS) else raw

    pieces: list[tuple[str, list[int], bytes]] = [(t.name, t.dims, weights(t.name, t)) for t in layout.tensors]
    attention = f"blk.{n_layer - 1}."  # the fixture's last block is a full-attention one
    for name, t in by_name.items():
        # Weights only: a real head has no biases, and the fixture's quantization scales are its own.
        if name.startswith(attention) and name.endswith(".weight"):
            copy = f"blk.{n_layer}." + name[len(attention) :]
            pieces.append((copy, t.dims, weights(copy, t)))
    rng = np.random.default_rng(seed)
    for name, dims in (
        ("nextn.eh_proj.weight", [2 * n_embd, n_embd]),
        ("nextn.enorm.weight", [n_embd]),
        ("nextn.hnorm.weight", [n_embd]),
    ):
        values = rng.normal(0.0, 0.1, size=int(np.prod(dims))).astype("<f4")
        if predictable:
            values = _echo_weights(name, n_embd)
        pieces.append((f"blk.{n_layer}.{name}", dims, values.tobytes()))

    tensors, data, offset = [], [], 0
    for name, dims, raw in pieces:
        tensors.append(Tensor(name, dims, F32, offset, -1))
        padded = raw + b"\0" * (-len(raw) % ALIGNMENT)
        data.append(padded)
        offset += len(padded)
    trunk = layout.kv(f"{arch}.attention.recurrent_layers").raw[12:]  # item type, count, then uint32 flags
    flags = [*struct.unpack(f"<{n_layer}I", trunk), 0]  # the head is not recurrent
    layout = replace(layout, tensors=tensors)
    layout = with_kv(layout, f"{arch}.block_count", UINT32, u32(n_layer + 1))
    layout = with_kv(layout, f"{arch}.nextn_predict_layers", UINT32, u32(1))
    layout = with_kv(
        layout,
        f"{arch}.attention.recurrent_layers",
        ARRAY,
        u32(UINT32) + struct.pack("<Q", len(flags)) + b"".join(u32(f) for f in flags),
    )
    header = gguf_damage.header_bytes(layout)
    with open(dest, "wb") as out:
        out.write(header + b"\0" * (-len(header) % ALIGNMENT))
        out.write(b"".join(data))
    return dest


def _echo_weights(name: str, n_embd: int) -> np.ndarray:
    """Norm weights of one, and an input projection that keeps the token's (normed) embedding:
    row j of eh_proj (2·n_embd inputs, the embedding first) picks input j."""
    if name != "nextn.eh_proj.weight":
        return np.ones(n_embd, dtype="<f4")
    projection = np.zeros((n_embd, 2 * n_embd), dtype="<f4")
    projection[np.arange(n_embd), np.arange(n_embd)] = 1.0
    return projection.ravel()


def _nbytes(tensor: Tensor) -> int:
    assert tensor.ttype == F32, f"{tensor.name}: the fixture's tensors are F32"
    return 4 * int(np.prod(tensor.dims))
