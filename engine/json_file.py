"""JSON files written whole or not at all: settings, library caches, download records, the load guard."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json(path: Path, data, *, indent: int | None = 1) -> None:
    """Write data beside path, flush it to disk, then rename it over path: a crash or a full disk
    leaves the old file or the new one, never half of one (and no stray temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent)  # ASCII: a file name with undecodable bytes (surrogates) stays writable
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
