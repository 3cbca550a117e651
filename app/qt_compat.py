"""A work-around for a reference-counting bug in PySide6 6.12.0 on Python 3.10 and 3.11.

PySide6 6.12.0 returns None from every void method (setText, insertText, setPosition, ...)
and True from SignalInstance.emit() without taking a new reference, so each such call takes
one reference away from None or True. From Python 3.12 on these objects are immortal and
nothing happens. On 3.10 and 3.11 their counts (a few thousand at start) reach zero after a
few thousand calls and the interpreter aborts ("none_dealloc: deallocating None", or
"bool_dealloc") - in the middle of a streaming answer, or at exit.

guard() probes for the leak and, only where it is seen, gives None, True and False the
effectively infinite reference count that Python 3.12 gives them ("immortal objects",
PEP 683). No other object is touched.
"""

from __future__ import annotations

import ctypes
import sys

_IMMORTAL_ENOUGH = 1 << 40
_guarded = False


def leaks(singleton, call) -> bool:
    """True when call() returns singleton without a reference of its own."""
    before = sys.getrefcount(singleton)
    result = call()
    after = sys.getrefcount(singleton)
    if result is not singleton:
        return False
    # A correct binding returns a new reference: while `result` holds it, the count is one higher.
    return after == before


def probe() -> dict[str, bool]:
    from PySide6.QtCore import QObject, Signal

    class Probe(QObject):
        fired = Signal()

    obj = Probe()
    return {
        "void method returns a borrowed None": leaks(None, lambda: obj.setObjectName("probe")),
        "emit returns a borrowed True": leaks(True, obj.fired.emit),
    }


def guard() -> bool:
    """Install the work-around if this Python and PySide6 need it (idempotent). Returns whether it is on."""
    global _guarded
    if _guarded:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False  # None, True and False are immortal: the leak cannot hurt
    try:
        found = probe()
    except ImportError:
        return False
    if not any(found.values()):
        return False
    for singleton in (None, True, False):
        # ob_refcnt is the first field of every object in CPython < 3.12.
        ctypes.c_ssize_t.from_address(id(singleton)).value += _IMMORTAL_ENOUGH
    _guarded = True
    return True
