"""`python -m tests`: the whole check, as CI runs it: lint, the import boundary, then pytest."""

import subprocess
import sys
from pathlib import Path

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))

STEPS = [
    ("ruff (lint)", [sys.executable, "-m", "ruff", "check", "."]),
    ("import boundary: engine never imports Qt", [LINT_IMPORTS, "--config", "pyproject.toml"]),
    ("pytest", [sys.executable, "-m", "pytest", *sys.argv[1:]]),
]


def main() -> int:
    for name, command in STEPS:
        print(f"== {name}", flush=True)
        code = subprocess.call(command)
        if code != 0:  # includes pytest's 5: no tests collected is a failure
            print(f"== {name} failed with exit code {code}", flush=True)
            return code or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
