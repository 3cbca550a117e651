"""Token bytes to displayed text: whole UTF-8 characters only, and stop strings cut cleanly.

A token can end in the middle of a multi-byte character (Chinese, emoji): its text is held
until the character completes. Text that might be the start of a stop string is held back until
it is clear either way, so a stop string never flashes on screen.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Piece:
    token: int
    text: str
    source: object


class TextStream:
    def __init__(self, stop: Sequence[str] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in stop if s]
        self._held: list[Piece] = []
        self.text = ""  # everything released so far
        self.stopped = False

    def push(self, token: int, data: bytes, source: object) -> list[Piece]:
        """Add one token's bytes; return the pieces now safe to show."""
        self._held.append(Piece(token, self._decoder.decode(data), source))
        return self._release(final=False)

    def finish(self) -> list[Piece]:
        """The answer ended: flush held text (an incomplete character becomes U+FFFD)."""
        tail = self._decoder.decode(b"", final=True)
        if tail and self._held:
            self._held[-1].text += tail
        return self._release(final=True)

    def _release(self, final: bool) -> list[Piece]:
        if not self.stop:
            out, self._held = self._held, []
            self.text += "".join(p.text for p in out)
            return out
        held_text = "".join(p.text for p in self._held)
        hits = [i for i in (held_text.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.stopped = True
            safe = min(hits)
        elif final:
            safe = len(held_text)
        else:
            safe = len(held_text) - _partial_stop_suffix(held_text, self.stop)
        out, used = [], 0
        while self._held and used + len(self._held[0].text) <= safe:
            piece = self._held.pop(0)
            used += len(piece.text)
            out.append(piece)
        if self.stopped:
            if self._held and used < safe:  # the token that contains the stop string's start
                piece = self._held[0]
                out.append(Piece(piece.token, piece.text[: safe - used], piece.source))
            self._held = []
        self.text += "".join(p.text for p in out)
        return out


def _partial_stop_suffix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best
