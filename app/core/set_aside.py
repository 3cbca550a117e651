"""Set a damaged file aside: renamed beside itself to a free '<name>.damaged-<time>', never over
another file and never deleted (chats.sqlite3 and settings.json both)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def move_aside(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """Rename path, and the files named path + each companion suffix that exist, to a free name.

    Returns the new path; raises OSError (FileExistsError when no free name is found)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        aside = path.with_name(f"{path.name}.damaged-{stamp}" + (f"-{n}" if n else ""))
        if not any(os.path.lexists(aside.with_name(aside.name + c)) for c in ("", *companions)):
            break
    else:
        raise FileExistsError(f"no free name beside {path}")
    os.rename(path, aside)
    for suffix in companions:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            os.rename(companion, aside.with_name(aside.name + suffix))
    return aside
