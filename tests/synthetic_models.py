"""Small random-weight GGUF models of the hybrid and recurrent architectures, made by llama.cpp itself.

llama.cpp's own test generator (`tests/test-llama-archs.cpp` in the llama.cpp that the installed
llama-cpp-python vendors) writes a model of any architecture it supports: 2-3 layers, a 128-token
vocabulary, weights drawn from a seed. It is compiled once (about 20 s) from that version's sdist
against the installed libllama, so the files match the llama.cpp that loads them; the generator and
its models are cached beside the other test models (SPECULA_TEST_MODELS), one folder per version.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

import llama_cpp

from tests.models import MODELS_DIR

# The architectures issue 23 names that this llama.cpp's generator can write (its model saver has no
# rwkv6/rwkv7), plus Mamba 1, and qwen2 as the plain-attention control.
HYBRID = ("qwen35", "lfm2", "granitehybrid", "falcon-h1")
RECURRENT = ("mamba2", "mamba")
ATTENTION = ("qwen2",)
TARGET_SEED, DRAFT_SEED = 1, 2  # the draft: the same architecture and vocabulary, other weights

# What the generator needs from the sdist: its source, the headers it includes, and common's log,
# JSON and batch helpers (everything else comes from the installed libllama and libggml).
_MEMBERS = ("include/", "ggml/include/", "src/", "common/", "vendor/", "tests/test-llama-archs.cpp")
_SOURCES = ("tests/test-llama-archs.cpp", "common/log.cpp", "common/common.cpp", "common/json.cpp")


def _version() -> str:
    return metadata.version("llama-cpp-python")


def _folder() -> Path:
    return MODELS_DIR / f"synthetic-llama-cpp-python-{_version()}"


def generator() -> Path:
    """The compiled test-llama-archs, built on first use."""
    binary = _folder() / "test-llama-archs"
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    lib = Path(llama_cpp.__file__).parent / "lib"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            + [f"llama-cpp-python=={_version()}", "-d", tmp],
            check=True,
        )
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        root = Path(tmp) / "src"
        with tarfile.open(sdist) as tar:
            prefix = tar.getnames()[0].split("/")[0] + "/vendor/llama.cpp/"
            wanted = [m for m in tar.getmembers() if m.name.startswith(tuple(prefix + x for x in _MEMBERS))]
            for m in wanted:
                m.name = m.name[len(prefix) :]
            tar.extractall(root, members=wanted, filter="data")
        includes = [f"-I{root / d}" for d in ("include", "ggml/include", "common", "src", "vendor")]
        part = binary.with_suffix(".part")
        subprocess.run(
            ["g++", "-std=c++17", "-O1", "-w", "-ffunction-sections", "-fdata-sections", "-Wl,--gc-sections"]
            + includes
            + [str(root / s) for s in _SOURCES]
            + ["-o", str(part), f"-L{lib}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-pthread"],
            check=True,
        )
        part.rename(binary)
    return binary


def synthetic(arch: str, seed: int = TARGET_SEED, moe: bool = False) -> Path:
    """The random-weight model of arch (a llama.cpp architecture name) drawn with seed, made once;
    moe: its mixture-of-experts variant (qwen35moe), larger than the dense one."""
    path = _folder() / f"seed{seed}" / f"{arch}-{'moe' if moe else 'dense'}.gguf"
    if path.is_file():
        return path
    tool = generator()
    with tempfile.TemporaryDirectory(dir=_folder()) as tmp:
        result = subprocess.run(
            [str(tool), "-a", f"^{arch}$", "-s", str(seed), "-o", tmp],
            capture_output=True,
            text=True,
            env={**os.environ, "LLAMA_LOG_VERBOSITY": "0"},
        )
        made = Path(tmp) / path.name
        if result.returncode != 0 or not made.is_file():
            raise RuntimeError(f"test-llama-archs wrote no {arch} model:\n{result.stderr[-2000:]}")
        path.parent.mkdir(parents=True, exist_ok=True)
        made.rename(path)
    return path
