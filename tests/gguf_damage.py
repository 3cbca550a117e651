"""Damaged copies of a real GGUF file, one per kind of damage, for the bad-input tests.

The header is walked here with a small reader of its own (not engine/gguf/header.py, the code under
test) and either patched in place or written anew around the original tensor data, so every
copy is the real model with one thing wrong.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY, UINT32 = 8, 9, 4


@dataclass
class KV:
    key: str
    vtype: int
    raw: bytes  # the value's bytes, as stored (for an array: item type, count, items)
    at: int  # where the value starts in the original file


@dataclass
class Tensor:
    name: str
    dims: list[int]
    ttype: int
    offset: int
    at: int  # where the entry starts in the original file


@dataclass
class Layout:
    kvs: list[KV]
    tensors: list[Tensor]
    header_end: int
    data_start: int
    size: int
    extra: dict = field(default_factory=dict)

    def kv(self, key: str) -> KV:
        return next(kv for kv in self.kvs if kv.key == key)


def read_layout(path: Path) -> Layout:
    data = path.read_bytes()[: 16 << 20]
    pos = 0

    def take(fmt: str):
        nonlocal pos
        value = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n : pos].decode("utf-8", "surrogateescape")

    def skip_value(vtype: int) -> None:
        nonlocal pos
        if vtype in _SCALAR:
            pos += struct.calcsize(_SCALAR[vtype])
        elif vtype == STRING:
            string()
        else:
            etype, count = take("I"), take("Q")
            for _ in range(count):
                skip_value(etype)

    assert data[:4] == b"GGUF"
    pos = 8
    n_tensors, n_kv = take("Q"), take("Q")
    kvs = []
    for _ in range(n_kv):
        key = string()
        vtype = take("I")
        start = pos
        skip_value(vtype)
        kvs.append(KV(key, vtype, data[start:pos], start))
    tensors = []
    for _ in range(n_tensors):
        at = pos
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        tensors.append(Tensor(name, dims, take("I"), take("Q"), at))
    alignment = next((struct.unpack("<I", kv.raw)[0] for kv in kvs if kv.key == "general.alignment"), 32)
    data_start = (pos + alignment - 1) // alignment * alignment
    return Layout(kvs, tensors, pos, data_start, path.stat().st_size)


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def header_bytes(layout: Layout, n_tensors: int | None = None, n_kv: int | None = None) -> bytes:
    out = [
        b"GGUF",
        struct.pack(
            "<IQQ",
            3,
            n_tensors if n_tensors is not None else len(layout.tensors),
            n_kv if n_kv is not None else len(layout.kvs),
        ),
    ]
    for kv in layout.kvs:
        out += [_s(kv.key), struct.pack("<I", kv.vtype), kv.raw]
    for t in layout.tensors:
        out += [
            _s(t.name),
            struct.pack("<I", len(t.dims)),
            *(struct.pack("<Q", d) for d in t.dims),
            struct.pack("<IQ", t.ttype, t.offset),
        ]
    return b"".join(out)


def rewrite(src: Path, dest: Path, layout: Layout, pad_to: int = 32, sparse: bool = False) -> None:
    """A new header from layout, padded to pad_to, followed by the original tensor data.

    sparse: the data becomes a hole of the same size (for tests that read only headers).
    """
    original = read_layout(src)
    header = header_bytes(layout)
    with open(src, "rb") as fin, open(dest, "wb") as out:
        out.write(header + b"\0" * (-len(header) % pad_to))
        if sparse:
            out.truncate(out.tell() + original.size - original.data_start)
            return
        fin.seek(original.data_start)
        shutil.copyfileobj(fin, out, 8 << 20)


def patched(src: Path, dest: Path, patches: list[tuple[int, bytes]], size: int | None = None, sparse=False) -> None:
    """A copy of src (optionally cut to size) with bytes replaced at the given positions.

    sparse: only the header is copied; the tensor data becomes a hole of the same size.
    """
    size = size if size is not None else src.stat().st_size
    copied = min(size, read_layout(src).data_start) if sparse else size
    with open(src, "rb") as fin, open(dest, "wb") as out:
        remaining = copied
        while remaining > 0:
            chunk = fin.read(min(8 << 20, remaining))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)
        out.truncate(size)
    with open(dest, "r+b") as f:
        for at, raw in patches:
            f.seek(at)
            f.write(raw)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def with_kv(layout: Layout, key: str, vtype: int, raw: bytes) -> Layout:
    kvs = [kv for kv in layout.kvs if kv.key != key] + [KV(key, vtype, raw, -1)]
    return replace(layout, kvs=kvs)


@dataclass(frozen=True)
class Damage:
    name: str  # the file's name: <class>-<detail>.gguf
    kind: str  # the class of bad input, for the report
    make: Callable[[Path, Path, Layout], None]
    expect: str = ""  # a word the message must contain ("" when llama.cpp's own words are quoted)

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


def _nested_arrays(_src: Path, dest: Path, _layout: Layout, **_) -> None:
    # ~60 KB: one key whose value is an array of an array of ... 5,000 levels deep.
    depth = 5000
    body = b"".join(u32(ARRAY) + u64(1) for _ in range(depth)) + u32(0) + u64(0)
    dest.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("general.nested") + u32(ARRAY) + body)


def catalogue(src: Path, seed: int = 9) -> list[Damage]:
    """Every damaged file the tests make from src, a real GGUF model."""
    lay = read_layout(src)
    arch_kv = lay.kv("general.architecture")
    arch = arch_kv.raw[8:].decode()
    blocks = lay.kv(f"{arch}.block_count")
    size = lay.size
    last, middle = lay.tensors[-1], lay.tensors[len(lay.tensors) // 2]
    tokens = lay.kv("tokenizer.ggml.tokens")
    rng = random.Random(seed)
    items: list[Damage] = []

    def add(name, kind, make, expect=""):
        items.append(Damage(name, kind, make, expect))

    def patch(*patches, cut=None):
        return lambda s, d, _l, sparse=False: patched(s, d, list(patches), cut, sparse)

    def relayout(change, pad_to=32):
        return lambda s, d, layout, sparse=False: rewrite(s, d, change(layout), pad_to, sparse)

    def tensor_change(index, **fields):
        def change(layout):
            tensors = list(layout.tensors)
            tensors[index] = replace(tensors[index], **fields)
            return replace(layout, tensors=tensors)

        return change

    # Not a model at all.
    add("empty", "empty or random bytes", lambda s, d, _l, **_: d.write_bytes(b""), "empty")
    add(
        "random-4k",
        "empty or random bytes",
        lambda s, d, _l, **_: d.write_bytes(random.Random(seed + 1).randbytes(4096)),
        "not a GGUF",
    )
    add(
        "random-after-magic",
        "empty or random bytes",
        lambda s, d, _l, **_: d.write_bytes(b"GGUF" + u32(3) + random.Random(seed).randbytes(60_000)),
        "damaged",
    )
    # Cut short: an unfinished download.
    for cut in (3, 20, 1000, tokens.at + 5000, lay.header_end, size // 2, size - 1):
        add(f"truncated-at-{cut}", "truncated", patch(cut=cut), "incomplete")
    # Counts and lengths no file can hold.
    add("huge-tensor-count", "huge counts or lengths", patch((8, u64(1 << 63))), "damaged")
    add("huge-key-count", "huge counts or lengths", patch((16, u64(1 << 40))), "damaged")
    add("huge-key-length", "huge counts or lengths", patch((24, u64(2**64 - 1))), "damaged")
    add("huge-string-length", "huge counts or lengths", patch((arch_kv.at, u64(17214436811902163250))), "damaged")
    add("huge-token-count", "huge counts or lengths", patch((tokens.at + 4, u64(1 << 40))), "damaged")
    add("token-count-past-end", "huge counts or lengths", patch((tokens.at + 4, u64(1 << 29))), "damaged")
    # Tensors that do not fit the file.
    add(
        "offset-past-end",
        "tensor offset past the end",
        relayout(tensor_change(-1, offset=last.offset + size)),
        "damaged",
    )
    add(
        "offset-huge-middle",
        "tensor offset past the end",
        relayout(tensor_change(len(lay.tensors) // 2, offset=1 << 62)),
        "damaged",
    )
    # Shapes.
    add("dims-swapped", "wrong dimensions", relayout(tensor_change(0, dims=list(reversed(lay.tensors[0].dims)))))
    add(
        "dims-doubled-middle",
        "wrong dimensions",
        relayout(tensor_change(len(lay.tensors) // 2, dims=[*middle.dims[:-1], 2 * middle.dims[-1]])),
        "damaged",
    )
    add(
        "dims-doubled-last",
        "wrong dimensions",
        relayout(tensor_change(-1, dims=[*last.dims[:-1], 2 * last.dims[-1]])),
        "ends at byte",
    )
    add("dims-zero", "wrong dimensions", relayout(tensor_change(1, dims=[0, *lay.tensors[1].dims[1:]])), "damaged")
    add("dims-huge", "wrong dimensions", relayout(tensor_change(1, dims=[1 << 40, 1 << 40, 1 << 40])), "damaged")
    add("dims-five", "wrong dimensions", relayout(tensor_change(1, dims=[32, 1, 1, 1, 1])), "damaged")
    add(
        "dims-row-not-blocks",
        "wrong dimensions",
        relayout(tensor_change(next(i for i, t in enumerate(lay.tensors) if t.ttype == 3), dims=[33, 2])),
        "damaged",
    )
    # Tensor types.
    for ttype in (4, 99, 1 << 31):
        add(f"tensor-type-{ttype}", "unknown tensor type", relayout(tensor_change(0, ttype=ttype)), "tensor type")
    # Architectures.
    add(
        "arch-unknown",
        "unknown architecture",
        patch((arch_kv.at + 8, b"zzzzz"[: len(arch)].ljust(len(arch), b"z"))),
        "architecture",
    )
    add(
        "arch-other-known",
        "unknown architecture",
        patch((arch_kv.at + 8, b"qwen2"[: len(arch)].ljust(len(arch), b"2"))),
        "layer count",
    )
    # Alignment (complete files: the data is where the writer put it).
    for value in (0, 3, 48, 1 << 31):
        add(
            f"alignment-{value}",
            "bad alignment",
            relayout(lambda layout, v=value: with_kv(layout, "general.alignment", UINT32, u32(v))),
            "alignment",
        )
    add(
        "alignment-as-string",
        "bad alignment",
        relayout(lambda layout: with_kv(layout, "general.alignment", STRING, _s("32"))),
        "alignment",
    )
    # Values llama.cpp asserts on (SIGABRT) rather than reports.
    for value in (0, 513, 100000):
        add(f"block-count-{value}", "values llama.cpp aborts on", patch((blocks.at, u32(value))), "block_count")
    add("block-count-512", "values llama.cpp aborts on", patch((blocks.at, u32(512))))
    add(
        "expert-count-5000",
        "values llama.cpp aborts on",
        relayout(lambda layout: with_kv(layout, f"{arch}.expert_count", UINT32, u32(5000))),
        "expert",
    )
    add(
        "experts-none-used",
        "values llama.cpp aborts on",
        relayout(lambda layout: with_kv(layout, f"{arch}.expert_count", UINT32, u32(8))),
        "expert",
    )
    add(
        "rope-scaling-bogus",
        "values llama.cpp aborts on",
        relayout(lambda layout: with_kv(layout, f"{arch}.rope.scaling.type", STRING, _s("bogus"))),
        "RoPE",
    )
    # Deep nesting.
    add("nested-arrays-60k", "nested metadata arrays", _nested_arrays, "array of arrays")
    add(
        "nested-array-in-model",
        "nested metadata arrays",
        relayout(lambda layout: with_kv(layout, "general.nested", ARRAY, u32(ARRAY) + u64(1) + u32(ARRAY) + u64(0))),
        "array of arrays",
    )
    # Seeded byte flips in the header: in the scalar metadata, in the tensor table, anywhere.
    regions = {
        "meta": (24, tokens.at),
        "tensors": (lay.tensors[0].at, lay.header_end),
        "header": (0, lay.header_end),
    }
    for region, (lo, hi) in regions.items():
        for i in range(12):
            flips = [(rng.randrange(lo, hi), bytes([rng.randrange(256)])) for _ in range(rng.randint(1, 4))]
            add(f"flip-{region}-{i:02d}", "random byte flips in the header", patch(*flips))
    return items


def sparse_copy(damage: Damage, src: Path, dest: Path) -> None:
    """The damaged file with its header and size, its tensor data a hole (no disk space, same header)."""
    damage.make(src, dest, read_layout(src), sparse=True)


def remove_all(made: list[tuple[Damage, Path]]) -> None:
    for _damage, path in made:
        if os.path.exists(path):
            os.unlink(path)
