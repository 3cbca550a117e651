"""Tokenize a formatted conversation so that only the chat template's own markers are control tokens.

A user who types `<|im_end|>` or `<start_of_turn>` must get those characters, not the control
token that ends their turn and lets them write the assistant's lines. So the prompt arrives as
segments: text the template wrote (whose control-token strings become control tokens) and message
content (plain text). Runs of plain text — template text between control tokens together with the
content inside it — are tokenized as one piece, the way llama.cpp tokenizes a whole prompt, so a
conversation without control strings in its content gets exactly the tokens it always got (and the
KV cache's prefix reuse across turns is unchanged).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp

_CONTROL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
_LSTRIP, _RSTRIP = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP, llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP


@dataclass(frozen=True)
class Segment:
    text: str
    template: bool  # True: written by the chat template; False: a message's content (plain text)


class PromptTokenizer:
    """One vocabulary's control tokens, and the rule above."""

    def __init__(self, vocab, n_vocab: int):
        self._vocab = vocab
        self.bos = llama_cpp.llama_vocab_bos(vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        # Control tokens by text, as llama.cpp's own special-token pass matches them: longest first.
        # (User-defined tokens such as <think> are matched by llama.cpp in plain text too.)
        self.controls: dict[str, tuple[int, int]] = {}
        for token in range(n_vocab):
            attr = llama_cpp.llama_vocab_get_attr(vocab, token)
            if attr & _CONTROL:
                text = llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8", errors="replace")
                if text:
                    self.controls.setdefault(text, (token, attr))
        names = sorted(self.controls, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, names))) if names else None

    def tokens(self, segments: Sequence[Segment]) -> list[int]:
        """Token ids for the prompt: BOS when the vocabulary wants one, given once."""
        # Fragments: a str is plain text, a tuple (id, attr) a control token the template wrote.
        fragments: list = []
        for seg in segments:
            pos = 0
            if seg.template and self._pattern is not None:
                for m in self._pattern.finditer(seg.text):
                    fragments += [seg.text[pos : m.start()], self.controls[m.group()]]
                    pos = m.end()
            fragments.append(seg.text[pos:])
        out = [self.bos] if self.add_bos and self.bos >= 0 else []
        run: list[str] = []  # plain text since the last control token, tokenized in one piece
        eat_space = False  # the last control token eats the whitespace after it (RSTRIP)
        for fragment in fragments:
            if isinstance(fragment, str):
                if eat_space:
                    fragment = fragment.lstrip()
                    eat_space = not fragment
                run.append(fragment)
                continue
            token, attr = fragment
            text = "".join(run)
            out += self.plain(text.rstrip() if attr & _LSTRIP else text)
            run.clear()
            out.append(token)
            eat_space = bool(attr & _RSTRIP)
        out += self.plain("".join(run))
        if len(out) >= 2 and out[0] == out[1] == self.bos:
            out.pop(0)  # the template wrote the BOS itself
        return out

    def plain(self, text: str) -> list[int]:
        """Text as text: no control tokens, no BOS."""
        data = text.encode("utf-8")
        if not data:
            return []
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, len(buf), False, False)
        if n < 0:
            buf = (llama_cpp.llama_token * -n)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, len(buf), False, False)
        return list(buf[:n])
