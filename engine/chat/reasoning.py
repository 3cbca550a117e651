"""Split a reasoning model's answer into its thinking and its answer, as the text streams.

Reasoning models (Qwen 3, DeepSeek-R1 distills, ...) open their answer with `<think>`, reason,
write `</think>`, then answer. The markers may arrive split across tokens, several to a token,
or many at once inside an accepted draft; text that might be the start of a marker is held back
until it is clear. The markers themselves are never shown. Only an opening marker at the very
start of the answer opens a thinking block (a `<think>` mid-answer is text the model is writing),
and a prompt that ends with the opening marker (some templates write it) starts inside one.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.chat.textstream import Piece


@dataclass
class Part:
    """A piece of the answer's text, on one side of the split."""

    piece: Piece
    reasoning: bool


class PieceSplitter:
    """An answer's pieces in, Parts out: text is held until it is clear which side of the split it is on.
    Subclasses read the markers (_release); the answer's readers see only push_all and what it counts."""

    def __init__(self, thinking: bool = False):
        self.entered = thinking  # a thinking block was opened
        self.reasoning = ""  # the thinking text so far
        self.n_reasoning_tokens = 0  # tokens pushed until the thinking ended (its markers included)
        self._held: list[Piece] = []
        self._pushed = 0

    def push(self, piece: Piece) -> list[Part]:
        """Add one token's text; return the parts now safe to show."""
        self._pushed += 1
        if piece.text:  # a token that ends inside a UTF-8 character shows nothing yet: nothing to hold
            self._held.append(piece)
        return self._release(final=False)

    def finish(self) -> list[Part]:
        return self._release(final=True)

    def push_all(self, pieces, final: bool = False) -> list[Part]:
        """push() each piece (TextStream's output); with final, finish() after them."""
        out = [part for piece in pieces for part in self.push(piece)]
        return out + self.finish() if final else out

    def _release(self, final: bool) -> list[Part]:
        raise NotImplementedError

    def _take(self, n: int, reasoning: bool) -> list[Part]:
        """The first n characters of the held text, piece by piece (a piece may be cut in two)."""
        out = []
        while n > 0 and self._held:
            piece = self._held[0]
            if len(piece.text) <= n:
                self._held.pop(0)
                out.append(Part(piece, reasoning))
                n -= len(piece.text)
            else:
                out.append(Part(Piece(piece.token, piece.text[:n], piece.source), reasoning))
                self._held[0] = Piece(piece.token, piece.text[n:], piece.source)
                n = 0
        return out

    def _drop(self, n: int) -> None:
        self._take(n, reasoning=False)


class ReasoningSplitter(PieceSplitter):
    def __init__(self, opening: str = "<think>", closing: str = "</think>", thinking: bool = False):
        super().__init__(thinking)
        self.opening, self.closing = opening, closing
        # "start": nothing but whitespace yet; "thinking"; "answer".
        self.state = "thinking" if thinking else "start"
        self._trim_answer = False  # drop the whitespace between </think> and the answer
        self._trim_thinking = thinking  # drop the newline right after <think>

    @property
    def answering(self) -> bool:
        return self.state == "answer"

    # -- the state machine ---------------------------------------------------------------------

    def _release(self, final: bool) -> list[Part]:
        out: list[Part] = []
        while self._held:
            text = "".join(p.text for p in self._held)
            if self.state == "start":
                body = text.lstrip()
                if body.startswith(self.opening):
                    self._drop(len(text) - len(body) + len(self.opening))
                    self.state, self.entered, self._trim_thinking = "thinking", True, True
                    continue
                if not final and (not body or self.opening.startswith(body)):
                    break  # only whitespace, or the marker's beginning: wait
                self.state = "answer"
                continue
            if self.state == "thinking":
                if self._trim_thinking:
                    stripped = text.lstrip("\n")
                    self._drop(len(text) - len(stripped))
                    text = stripped
                    if not text and not final:
                        break
                    self._trim_thinking = False
                at = text.find(self.closing)
                if at >= 0:
                    out += self._take(at, reasoning=True)
                    self._drop(len(self.closing))
                    self.state, self._trim_answer = "answer", True
                    self.n_reasoning_tokens = self._pushed
                    continue
                keep = 0 if final else _partial_suffix(text, self.closing)
                out += self._take(len(text) - keep, reasoning=True)
                break
            # answer
            if self._trim_answer:
                stripped = text.lstrip()
                self._drop(len(text) - len(stripped))
                if not stripped:
                    break
                self._trim_answer = False
            out += self._take(len(text), reasoning=False)
        if self.state == "thinking":
            self.n_reasoning_tokens = self._pushed
        self.reasoning += "".join(part.piece.text for part in out if part.reasoning)
        return [part for part in out if part.piece.text]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of marker."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
