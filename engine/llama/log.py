"""Route llama.cpp's log into Python logging and keep the recent lines for error messages.

llama.cpp explains a failed load only in its log ("unknown model architecture", "failed to
allocate buffer"); keeping the last lines lets the engine's errors say why.
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections import deque

import llama_cpp

log = logging.getLogger("engine.llama")
# ggml_log_level: only ERROR lines are reasons. The metadata dump (INFO) quotes whatever the file
# holds ("unknown", "invalid"...), so matching words would quote the file back as the cause.
LEVEL_ERROR, LEVEL_CONT = 4, 5
_recent: deque[tuple[int, str]] = deque(maxlen=5000)  # (level, line); a load logs ~2,000 (a line per repacked tensor)
_count = 0  # lines ever logged, so a mark survives the deque dropping old lines
_last_level = 0


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _count, _last_level
    if level != LEVEL_CONT:
        _last_level = level
    line = text.decode("utf-8", errors="replace").rstrip()
    if line:
        _recent.append((_last_level, line))
        _count += 1
        # Everything at DEBUG: failures reach the user through the engine's errors, which quote
        # these lines; at WARNING they would spill onto the terminal chat.
        log.debug(line)


_installed = False


def install() -> None:
    """Install once per process; the callback object lives at module level so it is never freed."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        _installed = True


def mark() -> int:
    """A position in the log, to read what a call wrote after it."""
    return _count


def _entries_since(position: int) -> list[tuple[int, str]]:
    n_new = min(_count - position, len(_recent))
    return list(_recent)[len(_recent) - n_new :] if n_new > 0 else []


def since(position: int) -> list[str]:
    return [line for _level, line in _entries_since(position)]


# "llama_model_load: error loading model: " and the like: where the message came from, not what it says.
_SOURCE_PREFIX = re.compile(r"^(\w+: )+(error loading model: )?")
_GENERIC = re.compile(r"^(failed to load model|failed to read tensor info|failed to read key-value pairs)$")


def errors_since(position: int) -> str:
    """What llama.cpp logged as errors since position (its reasons for a failure), most specific first."""
    reasons = [_SOURCE_PREFIX.sub("", line) for level, line in _entries_since(position) if level == LEVEL_ERROR]
    specific = [r for r in reasons if r and not _GENERIC.match(r)]
    return "; ".join(dict.fromkeys((specific or reasons)[-3:]))


def offloaded_layers(position: int) -> tuple[int, int] | None:
    """(offloaded, total) from llama.cpp's 'offloaded X/Y layers to GPU' line, if it logged one."""
    for line in reversed(since(position)):
        m = re.search(r"offloaded (\d+)/(\d+) layers to GPU", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def buffer_sizes(position: int) -> dict[str, float]:
    """MiB per weight buffer type ("CPU", "CPU_REPACK", "AMX", "CUDA0"...) from the last load's log."""
    sizes: dict[str, float] = {}
    for line in since(position):
        m = re.search(r"(\S+) model buffer size =\s*([\d.]+) MiB", line)
        if m:
            sizes[m.group(1)] = sizes.get(m.group(1), 0.0) + float(m.group(2))
    return sizes
