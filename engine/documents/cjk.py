"""Text without spaces between words (Chinese, Japanese, Korean runs of Hangul are spaced but
agglutinative) searched by its characters: SQLite's word index (unicode61) takes a whole run of such
characters for one word, so a question finds a passage only by a run that matches whole.

The index keeps a second full-text table over these runs alone, with SQLite's trigram tokenizer
(every three consecutive characters), and a question's runs are searched as their three-character
pieces, OR-ed: BM25 then ranks first the passages that share the most pieces (and the rarest) with
the question, which is how n-gram search of Chinese works. Text in other scripts goes into that
table as nothing, so a library without such text pays nothing for it.
"""

from __future__ import annotations

import re

# Han (with extension A and compatibility ideographs), kana, Hangul syllables.
RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
MAX_GRAMS = 64  # of a question: enough for a long one, never a query of thousands


def runs(text: str) -> str:
    """The text's runs of these scripts, space-separated ("" when it has none): what the trigram
    table indexes of a passage."""
    return " ".join(RUN.findall(text or ""))


def grams(question: str) -> list[str]:
    """The question's three-character pieces of those runs, each once, in order (at most
    MAX_GRAMS, the last ones: the question comes after an attached text); runs shorter than three
    characters cannot be searched this way and are left to the word index."""
    found: list[str] = []
    for run in RUN.findall(question):
        found += [run[i : i + 3] for i in range(len(run) - 2)]
    return list(dict.fromkeys(reversed(found)))[:MAX_GRAMS][::-1]
