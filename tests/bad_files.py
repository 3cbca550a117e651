"""Run model files through the engine's load path in child processes, with a crash or a hang
attributed to the file that caused it.

One child loads files one after another (starting Python and llama.cpp once per batch, not
per file). When it dies by a signal or stays silent past the per-file limit, that file is
marked and a new child carries on with the next one.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass

from tests.models import REPO


@dataclass(frozen=True)
class Outcome:
    path: str
    status: str  # loaded, error, exception, crash, hang
    message: str = ""


def load_each(paths: list[str], timeout_s: float = 120.0) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    pending = list(paths)
    while pending:
        results.update(_run_batch(pending, timeout_s))
        pending = [p for p in pending if p not in results]
    return results


def _run_batch(paths: list[str], timeout_s: float) -> dict[str, Outcome]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.load_each", *paths],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str] = []

    def pump() -> None:
        for line in child.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(child.stderr), daemon=True).start()
    results: dict[str, Outcome] = {}
    current = None
    while True:
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            child.kill()
            child.wait()
            if current is not None:
                results[current] = Outcome(current, "hang", f"no answer within {timeout_s:.0f} s")
            return results
        if line is None:
            break
        kind, _, rest = line.partition("\t")
        if kind == "BEGIN":
            current = rest
        elif kind == "END":
            path, outcome, message = rest.split("\t", 2)
            results[path] = Outcome(path, outcome, json.loads(message))
            current = None
    rc = child.wait()
    if current is not None:
        tail = "".join(stderr)[-2000:]
        results[current] = Outcome(current, "crash", f"exit code {rc}; stderr ends: {tail}")
    elif rc != 0 and not results:
        raise RuntimeError(f"the loader child failed before any file (exit code {rc}): {''.join(stderr)[-2000:]}")
    return results
