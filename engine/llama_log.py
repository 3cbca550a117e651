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
_recent: deque[str] = deque(maxlen=200)
_count = 0  # lines ever logged, so a mark survives the deque dropping old lines


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _count
    line = text.decode("utf-8", errors="replace").rstrip()
    if line:
        _recent.append(line)
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


def since(position: int) -> list[str]:
    n_new = min(_count - position, len(_recent))
    return list(_recent)[len(_recent) - n_new :] if n_new > 0 else []


def errors_since(position: int) -> str:
    """The lines that look like reasons (errors, failures) logged since position."""
    lines = since(position)
    reasons = [
        ln for ln in lines if re.search(r"error|fail|unknown|unsupported|invalid|cannot|out of memory", ln, re.I)
    ]
    return "; ".join(dict.fromkeys(reasons[-3:])) if reasons else ""


def offloaded_layers(position: int) -> tuple[int, int] | None:
    """(offloaded, total) from llama.cpp's 'offloaded X/Y layers to GPU' line, if it logged one."""
    for line in reversed(since(position)):
        m = re.search(r"offloaded (\d+)/(\d+) layers to GPU", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None
