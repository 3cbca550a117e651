"""Load each model file given through the Engine, as the app and CLI do; report one line per file.

Run as a child process by tests/bad_files.py: a native crash kills only this process, and the
BEGIN line written before each file says which file it was.
    python -m tests.load_each FILE...
"""

from __future__ import annotations

import json
import sys

from engine.config import ModelSpec
from engine.decoding.chat_engine import Engine
from engine.errors import EngineError


def main(paths: list[str]) -> int:
    for path in paths:
        print(f"BEGIN\t{path}", flush=True)
        try:
            engine = Engine(ModelSpec(path, n_ctx=256, n_threads=1))
        except EngineError as e:
            outcome, message = "error", e.user_message()
        except Exception as e:  # noqa: BLE001 - any other exception is a defect the test reports
            outcome, message = "exception", f"{type(e).__name__}: {e}"
        else:
            engine.close()
            outcome, message = "loaded", ""
        print(f"END\t{path}\t{outcome}\t{json.dumps(message)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
