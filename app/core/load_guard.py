"""Remember a model load in flight, so a model that failed, or took the app down, is not loaded
again by itself at the next start.

llama.cpp aborts the whole process on some files it cannot handle. With such a file as the
target, an app that loads its target at every start would die at every start. So the target's
path is written down before a load and cleared when the load succeeds or is abandoned at close;
a failure is written down with its message. At the next start, a record for the same target
means the last load did not succeed: the app says so and asks before trying again.
No Qt here: the window calls it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from engine.json_file import write_json
from engine.paths import data_dir

log = logging.getLogger(__name__)

FILE_NAME = "model-load.json"


class LoadGuard:
    def __init__(self, file: Path):
        self.file = file

    @classmethod
    def beside(cls, settings_path: Path | None) -> LoadGuard:
        """The guard kept next to the settings file (the data folder's by default)."""
        folder = settings_path.parent if settings_path is not None else data_dir()
        return cls(folder / FILE_NAME)

    def begin(self, target_path: str) -> None:
        self._write({"path": target_path, "outcome": "loading"})

    def failed(self, target_path: str, message: str) -> None:
        self._write({"path": target_path, "outcome": "failed", "message": message})

    def succeeded(self) -> None:
        self._clear()

    def abandoned(self) -> None:
        """The user closed the app while loading: not the model's fault."""
        self._clear()

    def last_problem(self, target_path: str) -> str | None:
        """Why the last load of target_path did not succeed, in words; None when nothing speaks against it."""
        try:
            record = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("path") != target_path:
            return None
        if record.get("outcome") == "loading":
            return "the last attempt to load it never finished: Specula closed unexpectedly while loading it."
        if record.get("outcome") == "failed":
            return f"the last attempt failed. {record.get('message') or ''}".strip()
        return None

    def _write(self, record: dict) -> None:
        # Whole and flushed to disk: the process may die right after this.
        try:
            write_json(self.file, record, indent=None)
        except OSError as e:  # a read-only data folder: loading still works, only unguarded
            log.warning("could not record the model load in %s: %s", self.file, e)

    def _clear(self) -> None:
        try:
            self.file.unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not clear %s: %s", self.file, e)
