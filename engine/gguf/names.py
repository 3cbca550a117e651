"""A model's name for people, from its GGUF header: "Qwen2.5-Coder 1.5B Instruct", not "… Instruct GGUF".

Converters write packaging into general.name and general.finetune ("Instruct-AWQ" for a file that
is Q4_K_M, "Instruct-GGUF"); the quantization is shown apart, so such words are dropped here.
"""

from __future__ import annotations

import re
from pathlib import Path

# Words about how a file was packaged or quantized, never about which model it is.
_PACKAGING = re.compile(
    r"^(gguf|ggml|awq|gptq|exl2|mlx|hqq|bnb|[0-9]+bit|int[48]|fp(8|16|32)|bf16|f16|f32|"
    r"[iu]?q[0-9]+(_[0-9a-z]+)*|iq[0-9]+(_[a-z]+)*|quantized|imatrix)$",
    re.IGNORECASE,
)


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-]+", text) if w and not _PACKAGING.match(w)]


def display_name(info, file_name: str | Path = "") -> str:
    """basename + size label + fine-tune, packaging words dropped; general.name (cleaned) without a
    basename; the file's stem when the header names nothing. info: a GGUF header (engine.gguf.header)."""
    stem = Path(file_name).name.removesuffix(".gguf") if file_name else ""
    basename = str(info.get("general.basename") or "").strip()
    if basename:
        if basename.islower() and stem.lower().startswith(basename.lower()):
            basename = stem[: len(basename)]  # the file often keeps the casing: "SmolLM2"
        if basename.islower():
            basename = basename[:1].upper() + basename[1:]
        parts = [basename]
        size = str(info.get("general.size_label") or "").strip()
        if size and size.lower() not in basename.lower():
            parts.append(size)
        parts += _words(str(info.get("general.finetune") or ""))
        return " ".join(parts)
    name = " ".join(_words(str(info.get("general.name") or "")))
    return name or " ".join(_words(stem)) or stem or "model"
