"""Read a GGUF file's header (metadata and tensor table) without loading the model.

Used to reject non-GGUF, damaged or truncated files with a clear reason before llama.cpp sees
them, to describe models in the library, and to check draft/target vocabularies from a header
alone (the downloader fetches only the first megabytes of a candidate draft).
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from engine.errors import ModelFileError

MAGIC = b"GGUF"

# GGUF metadata value types -> struct format (scalars only).
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

# ggml tensor type -> (elements per block, bytes per block), to find where the data must end.
_BLOCK = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 36),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
}

# llama.cpp's LLAMA_FTYPE values (general.file_type) -> the quantization name users know.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}

# Metadata arrays we keep; every other array is skipped (merges alone are megabytes of strings).
_KEPT_ARRAYS = {"tokenizer.ggml.tokens"}


class HeaderIncomplete(Exception):
    """The bytes given end inside the header: fetch more and try again (range downloads)."""


@dataclass
class GGUFInfo:
    path: str
    file_size: int
    version: int
    metadata: dict = field(repr=False)
    n_tensors: int = 0
    n_params: int = 0
    data_end: int = 0  # where the last tensor's bytes end; beyond file_size means truncated

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", "unknown"))

    @property
    def name(self) -> str:
        return str(self.get("general.name") or os.path.basename(self.path))

    @property
    def quantization(self) -> str:
        ftype = self.get("general.file_type")
        return FILE_TYPES.get(ftype, f"type {ftype}") if ftype is not None else "unknown"

    @property
    def context_length(self) -> int | None:
        value = self.get(f"{self.architecture}.context_length")
        return int(value) if value is not None else None

    @property
    def chat_template(self) -> str | None:
        return self.get("tokenizer.chat_template")

    @property
    def tokens(self) -> list[str]:
        return self.get("tokenizer.ggml.tokens", [])

    @property
    def vocab_fingerprint(self) -> str:
        """A short hash of the token texts: equal fingerprints mean identical vocabularies."""
        digest = hashlib.sha256("\x00".join(self.tokens).encode("utf-8", "surrogatepass"))
        return digest.hexdigest()[:12]

    @property
    def n_layers(self) -> int | None:
        value = self.get(f"{self.architecture}.block_count")
        return int(value) if value is not None else None

    def kv_bytes_per_token(self) -> int | None:
        """f16 K and V for every layer: what one token of context costs in memory."""
        arch = self.architecture
        layers = self.get(f"{arch}.block_count")
        heads_kv = self.get(f"{arch}.attention.head_count_kv") or self.get(f"{arch}.attention.head_count")
        embd = self.get(f"{arch}.embedding_length")
        heads = self.get(f"{arch}.attention.head_count")
        if not (layers and heads_kv and embd and heads):
            return None
        if isinstance(heads_kv, list):  # per-layer counts in some architectures
            heads_kv = max(heads_kv)
        head_dim = self.get(f"{arch}.attention.key_length") or embd // heads
        return int(2 * layers * heads_kv * head_dim * 2)


class _Reader:
    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.pos = 0

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) < n:
            raise HeaderIncomplete(f"header ends early at byte {self.pos + len(data)}")
        self.pos += n
        return data

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))[0]

    def string(self) -> str:
        n = self.unpack("Q")
        if n > 1 << 30:
            raise ModelFileError(f"implausible string length {n} at byte {self.pos}")
        return self.take(n).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int, keep: bool = True):
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("I"), self.unpack("Q")
            if etype in _SCALAR and etype != 7:
                fmt = _SCALAR[etype]
                raw = self.take(count * struct.calcsize(fmt))
                return list(struct.unpack(f"<{count}{fmt}", raw)) if keep else None
            items = [self.value(etype, keep) for _ in range(count)]
            return items if keep else None
        raise ModelFileError(f"unknown metadata type {vtype} at byte {self.pos}")


def parse_header(stream: BinaryIO, path: str = "", file_size: int | None = None) -> GGUFInfo:
    """Parse the header from a stream positioned at byte 0.

    Raises ModelFileError for a file that is not GGUF or is damaged, HeaderIncomplete if the
    stream ends inside the header (a partial download).
    """
    r = _Reader(stream)
    magic = r.take(4)
    if magic != MAGIC:
        raise ModelFileError(f"{_label(path)} is not a GGUF model file (it starts with {magic!r}, not b'GGUF').")
    version = r.unpack("I")
    if version not in (2, 3):
        raise ModelFileError(f"{_label(path)} uses GGUF version {version}; only versions 2 and 3 are supported.")
    n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
    if n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise ModelFileError(f"{_label(path)} has a damaged header (claims {n_tensors} tensors, {n_kv} keys).")
    metadata: dict = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.unpack("I")
        keep = vtype != _ARRAY or key in _KEPT_ARRAYS or _is_small_array_key(key)
        metadata[key] = r.value(vtype, keep)
    n_params, data_extent = 0, 0
    for _ in range(n_tensors):
        r.string()
        n_dims = r.unpack("I")
        if n_dims > 8:
            raise ModelFileError(f"{_label(path)} has a damaged tensor table.")
        n_elements = 1
        for _ in range(n_dims):
            n_elements *= r.unpack("Q")
        ttype, offset = r.unpack("I"), r.unpack("Q")
        n_params += n_elements
        if ttype in _BLOCK:
            per_block, block_bytes = _BLOCK[ttype]
            data_extent = max(data_extent, offset + n_elements // per_block * block_bytes)
    alignment = int(metadata.get("general.alignment", 32)) or 32
    data_start = (r.pos + alignment - 1) // alignment * alignment
    return GGUFInfo(
        path=path,
        file_size=file_size if file_size is not None else r.pos,
        version=version,
        metadata=metadata,
        n_tensors=n_tensors,
        n_params=n_params,
        data_end=data_start + data_extent,
    )


def _is_small_array_key(key: str) -> bool:
    # Per-layer hyperparameters (head counts in some architectures) are short arrays worth keeping.
    return not key.startswith("tokenizer.")


def _label(path: str) -> str:
    return f"'{os.path.basename(path)}'" if path else "The file"


def read_header(path: str | os.PathLike) -> GGUFInfo:
    """Read and validate a GGUF file on disk; ModelFileError says what is wrong with it."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelFileError(f"Model file not found: {path}")
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            info = parse_header(f, path, size)
    except HeaderIncomplete:
        raise ModelFileError(
            f"{_label(path)} is cut off inside its header ({size:,} bytes): the download or copy did not finish."
        ) from None
    except (UnicodeDecodeError, struct.error, MemoryError, OverflowError) as e:
        raise ModelFileError(f"{_label(path)} has a damaged header ({e}).") from None
    if info.data_end > size:
        raise ModelFileError(
            f"{_label(path)} is truncated: it has {size:,} bytes but its tensors need {info.data_end:,}. "
            "The download or copy did not finish."
        )
    return info
