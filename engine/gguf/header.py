"""Read a GGUF file's header (metadata and tensor table) without loading the model.

Used to reject non-GGUF, damaged or truncated files with a clear reason before llama.cpp sees
them, to describe models in the library, and to check draft/target vocabularies from a header
alone (the downloader fetches only the first megabytes of a candidate draft).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from engine.errors import ModelFileError
from engine.gguf.limits import check_llama_limits

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
    40: (64, 36),
    41: (128, 18),
    42: (64, 18),
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


# Encoders llama.cpp runs for embeddings (a file of these pools, whatever its header says).
ENCODER_ARCHITECTURES = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert", "modern-bert",
     "eurobert", "t5encoder", "gemma-embedding"}
)  # fmt: skip
RANK_POOLING = 4  # llama_pooling_type's value for a reranker


@dataclass
class GGUFInfo:
    path: str
    file_size: int
    version: int
    metadata: dict = field(repr=False)
    n_tensors: int = 0
    n_params: int = 0
    data_end: int = 0  # where the last tensor's bytes end; beyond file_size means truncated
    first_cut: tuple[str, int, bool] | None = None  # (name, end byte, is the last) of the first tensor past the end
    tensors: list = field(default_factory=list, repr=False)  # the tensor table: name, dims, ttype, offset

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
    def pooling_type(self) -> int | None:
        """llama_pooling_type as the file declares it (an embedding model or a reranker), else None."""
        value = self.get(f"{self.architecture}.pooling_type")
        return int(value) if isinstance(value, int) else None

    @property
    def is_embedding_model(self) -> bool:
        """It turns text into vectors (it pools, or is an encoder): not a model to chat with."""
        # 1 mean, 2 CLS, 3 last token; 0 none and -1 (4294967295 as stored) unspecified: a generator.
        return self.pooling_type in (1, 2, 3) or (
            self.pooling_type is None and self.architecture in ENCODER_ARCHITECTURES
        )

    @property
    def is_reranker(self) -> bool:
        return self.pooling_type == RANK_POOLING

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

    @property
    def sliding_window(self) -> int | None:
        """The attention window of a sliding-window model (Gemma 2/3, Mistral SWA), None for full attention."""
        value = self.get(f"{self.architecture}.attention.sliding_window")
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def nextn_layers(self) -> int:
        """Next-token-prediction (MTP) layers the file declares (Qwen3.5/3.6, GLM-4.5...): 0 for none."""
        value = self.get(f"{self.architecture}.nextn_predict_layers")
        return int(value) if isinstance(value, int) and value > 0 else 0

    @property
    def mtp_bytes(self) -> int:
        """The weights of the MTP layers (the last nextn_layers blocks): what loading the head adds."""
        if not self.nextn_layers or not self.n_layers:
            return 0
        first = self.n_layers - self.nextn_layers
        blocks = {f"blk.{i}." for i in range(first, self.n_layers)}
        return sum(t.n_bytes for t in self.tensors if t.name.startswith(tuple(blocks)))

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


# llama.cpp's own limits (ggml/src/gguf.cpp, ggml.h): files beyond them are refused there too.
MAX_STRING = 1 << 30  # GGUF_MAX_STRING_LENGTH
MAX_ARRAY = 1 << 30  # GGUF_MAX_ARRAY_ELEMENTS
MAX_TENSOR_NAME = 63  # GGML_MAX_NAME - 1
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32  # only when general.alignment is absent
# No real model has a single metadata value this large (a 262k-token vocabulary is ~5 MB); a
# value this size that runs past the end of the file is damage, not an unfinished download.
_PLAUSIBLE_VALUE = 64 << 20
_PLAUSIBLE_ALIGNMENT = 1 << 16


class _Reader:
    """Reads the header, bounding every length by what the file can still hold."""

    def __init__(self, stream: BinaryIO, path: str, end: int | None):
        self.stream = stream
        self.pos = 0
        self.label = _label(path)
        self.end = end  # the file's size, when known

    def damaged(self, problem: str) -> ModelFileError:
        return ModelFileError(f"{self.label} is damaged: {problem}.")

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) < n:
            raise HeaderIncomplete(f"header ends early at byte {self.pos + len(data)}")
        self.pos += n
        return data

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))[0]

    def check_room(self, n_bytes: int, what: str, at: int, claim: str = "") -> None:
        """Refuse a length that cannot be real; one that runs just past the end is a cut-off file."""
        claim = claim or f"claims to be {n_bytes:,} bytes long"
        if n_bytes > MAX_STRING:
            raise self.damaged(f"{what} at byte {at:,} {claim}, more than llama.cpp accepts (1 GiB)")
        if self.end is not None and self.pos + n_bytes > self.end and n_bytes > _PLAUSIBLE_VALUE:
            raise self.damaged(f"{what} at byte {at:,} {claim}, more than the rest of the file holds")

    def string(self, what: str) -> str:
        at = self.pos
        n = self.unpack("Q")
        self.check_room(n, what, at)
        return self.take(n).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int, key: str, keep: bool = True):
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string(f"the text of metadata key '{key}'")
        if vtype != _ARRAY:
            raise self.damaged(f"metadata key '{key}' has an unknown value type {vtype} (at byte {self.pos - 4:,})")
        at = self.pos
        etype, count = self.unpack("I"), self.unpack("Q")
        if count > MAX_ARRAY:
            raise self.damaged(f"the array '{key}' at byte {at:,} claims {count:,} items (llama.cpp accepts 2^30)")
        if etype in _SCALAR and etype != 7:
            fmt = _SCALAR[etype]
            size = count * struct.calcsize(fmt)
            self.check_room(size, f"the array '{key}'", at, f"claims {count:,} items")
            raw = self.take(size)
            return list(struct.unpack(f"<{count}{fmt}", raw)) if keep else None
        if etype == 7:
            self.check_room(count, f"the array '{key}'", at, f"claims {count:,} items")
            return [self.unpack("?") for _ in range(count)] if keep else None
        if etype == _STRING:
            # Each text takes at least the 8 bytes of its length.
            if self.end is not None and self.pos + count * 8 > self.end and count * 8 > _PLAUSIBLE_VALUE:
                raise self.damaged(f"the array '{key}' at byte {at:,} claims {count:,} texts, more than the file holds")
            items = [self.string(f"item {i} of '{key}'") for i in range(count)]
            return items if keep else None
        if etype == _ARRAY:
            # llama.cpp refuses arrays of arrays; reading them recursively let a small file exhaust the stack.
            raise self.damaged(f"metadata key '{key}' is an array of arrays, which GGUF readers do not accept")
        raise self.damaged(f"the array '{key}' has an unknown item type {etype} (at byte {at:,})")


@dataclass
class _Tensor:
    name: str
    dims: tuple[int, ...]
    ttype: int
    offset: int  # from the start of the data section
    n_bytes: int


def parse_header(stream: BinaryIO, path: str = "", file_size: int | None = None) -> GGUFInfo:
    """Parse the header from a stream positioned at byte 0.

    Raises ModelFileError for a file that is not GGUF or is damaged (each message names the file
    and the problem), HeaderIncomplete if the stream ends inside the header (a partial download).
    """
    r = _Reader(stream, path, file_size)
    magic = r.take(4)
    if magic != MAGIC:
        raise ModelFileError(f"{_label(path)} is not a GGUF model file (it starts with {magic!r}, not b'GGUF').")
    version = r.unpack("I")
    if version not in (2, 3):
        raise ModelFileError(f"{_label(path)} uses GGUF version {version}; only versions 2 and 3 are supported.")
    n_tensors, n_kv = r.unpack("Q"), r.unpack("Q")
    if n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise r.damaged(f"its header claims {n_tensors:,} tensors and {n_kv:,} metadata keys")
    metadata: dict = {}
    types: dict[str, int] = {}
    for i in range(n_kv):
        key = _shown(r.string(f"the name of metadata key {i}"))
        vtype = r.unpack("I")
        keep = vtype != _ARRAY or key in _KEPT_ARRAYS or _is_small_array_key(key)
        if key in metadata:
            raise r.damaged(f"metadata key '{key}' appears twice")
        metadata[key], types[key] = r.value(vtype, key, keep), vtype
    alignment = _alignment(r, metadata, types)
    tensors = [_read_tensor(r, i) for i in range(n_tensors)]
    data_start = (r.pos + alignment - 1) // alignment * alignment
    data_end = _check_layout(r, tensors, alignment, data_start)
    cut = next((t for t in tensors if r.end is not None and data_start + t.offset + t.n_bytes > r.end), None)
    return GGUFInfo(
        path=path,
        file_size=file_size if file_size is not None else r.pos,
        version=version,
        metadata=metadata,
        n_tensors=n_tensors,
        n_params=sum(math.prod(t.dims) for t in tensors),
        data_end=data_end,
        first_cut=(cut.name, data_start + cut.offset + cut.n_bytes, cut is tensors[-1]) if cut else None,
        tensors=tensors,
    )


def _alignment(r: _Reader, metadata: dict, types: dict[str, int]) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    value = metadata["general.alignment"]
    if types["general.alignment"] != 4:  # llama.cpp requires a uint32
        raise r.damaged(f"its alignment (general.alignment) is {value!r}, not a 32-bit unsigned number")
    if value == 0 or value & (value - 1):
        raise r.damaged(f"its alignment (general.alignment) is {value:,}, not a power of two")
    if value > _PLAUSIBLE_ALIGNMENT:
        raise r.damaged(f"its alignment (general.alignment) is {value:,} bytes, far beyond any real model's")
    return value


def _read_tensor(r: _Reader, index: int) -> _Tensor:
    at = r.pos
    name = r.string(f"the name of tensor {index}")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_TENSOR_NAME:
        raise r.damaged(f"the name of tensor {index} (at byte {at:,}) is {len(name):,} characters long")
    name = _shown(name)
    n_dims = r.unpack("I")
    if n_dims > MAX_DIMS:
        raise r.damaged(f"tensor '{name}' claims {n_dims:,} dimensions (at most {MAX_DIMS})")
    dims = tuple(r.unpack("Q") for _ in range(n_dims))
    if any(d == 0 or d >= 1 << 63 for d in dims):
        raise r.damaged(f"tensor '{name}' has an impossible shape {list(dims)}")
    if math.prod(dims) >= 1 << 63:
        raise r.damaged(f"tensor '{name}' has a shape {list(dims)} too large to count its elements")
    ttype, offset = r.unpack("I"), r.unpack("Q")
    if ttype not in _BLOCK:
        raise r.damaged(f"tensor '{name}' has tensor type {ttype}, which llama.cpp does not know")
    per_block, block_bytes = _BLOCK[ttype]
    if dims and dims[0] % per_block:
        raise r.damaged(f"tensor '{name}' has rows of {dims[0]:,} values, not whole blocks of {per_block}")
    return _Tensor(name, dims, ttype, offset, math.prod(dims) // per_block * block_bytes)


def _check_layout(r: _Reader, tensors: list[_Tensor], alignment: int, data_start: int) -> int:
    """Where the tensor data ends; tensors must follow each other as llama.cpp requires.

    Only a file whose tensors are laid out consistently and whose last tensors run past the end
    of the file is called incomplete; read_header says so.
    """
    seen: set[str] = set()
    expected = 0
    for t in tensors:
        if t.name in seen:
            raise r.damaged(f"tensor '{t.name}' appears twice")
        seen.add(t.name)
        if t.offset != expected:
            raise r.damaged(
                f"tensor '{t.name}' starts at offset {t.offset:,} of the data, but the tensor before it "
                f"ends at {expected:,} (a wrong offset or a wrong size in the tensor table)"
            )
        expected += (t.n_bytes + alignment - 1) // alignment * alignment
    if not tensors:
        return r.pos
    last = tensors[-1]
    return data_start + last.offset + last.n_bytes


def _is_small_array_key(key: str) -> bool:
    # Per-layer hyperparameters (head counts in some architectures) are short arrays worth keeping.
    return not key.startswith("tokenizer.")


def _shown(name: str) -> str:
    """A key or tensor name as it can appear in a message: damaged names hold control bytes."""
    if name.isprintable() and len(name) <= 80:
        return name
    return ascii(name[:60])[1:-1] + ("…" if len(name) > 60 else "")


def _label(path: str) -> str:
    return f"'{os.path.basename(path)}'" if path else "The file"


def read_header(path: str | os.PathLike) -> GGUFInfo:
    """Read and validate a GGUF file on disk; ModelFileError names the file and what is wrong.

    Beyond the format itself, values llama.cpp would abort the process on (rather than report)
    are refused here, so a bad file never reaches it.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelFileError(f"Model file not found: {path}")
    label = _label(path)
    try:
        size = os.path.getsize(path)
        if size == 0:
            raise ModelFileError(f"{label} is empty (0 bytes): the download or copy did not happen or did not finish.")
        with open(path, "rb") as f:
            info = parse_header(f, path, size)
    except HeaderIncomplete:
        raise ModelFileError(
            f"{label} is incomplete: it is cut off inside its header, after {size:,} bytes. "
            "Was the download or copy cut short?"
        ) from None
    except OSError as e:
        raise ModelFileError(f"{label} cannot be read: {e.strerror or e}.") from None
    except (UnicodeDecodeError, struct.error, MemoryError, OverflowError, RecursionError, ValueError) as e:
        raise ModelFileError(f"{label} is damaged: its header cannot be read ({type(e).__name__}: {e}).") from None
    if info.first_cut is not None:
        name, end, is_last = info.first_cut
        where = f"tensor '{name}' ends at byte {end:,} but the file has only {size:,} bytes"
        if is_last:  # only the last tensor is short: a cut file, or a wrong size for that tensor alone
            raise ModelFileError(
                f"{label} is incomplete or damaged: its last {where}. Either the download or copy was cut "
                "short, or the header gives that tensor a wrong size."
            )
        raise ModelFileError(f"{label} is incomplete (truncated): {where}. Was the download or copy cut short?")
    check_llama_limits(info)
    return info
