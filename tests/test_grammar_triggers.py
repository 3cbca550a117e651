"""The lazy tool grammar's triggers, as engine/llama/grammar.py mirrors them: which next piece opens the
grammar and with what text (llama.cpp hands that text to the grammar and aborts if it cannot take it, so
the mirror must agree with llama.cpp's regex_match on the whole answer)."""

import re

from engine.decoding.tool_grammar import HERMES_TRIGGERS
from engine.llama.grammar import Trigger, TriggerWatch


def watch_after(*pieces: bytes) -> TriggerWatch:
    watch = TriggerWatch(HERMES_TRIGGERS)
    for piece in pieces:
        assert watch.opened(piece) is None
        watch.advance(piece)
    return watch


def regex_opened(written: bytes) -> bytes | None:
    """What llama.cpp does, with Python's re on the same patterns: the first pattern found in the text
    (regex_search), from its first non-empty group on."""
    for trigger in HERMES_TRIGGERS:
        match = re.search(trigger.pattern().encode(), written)
        if match:
            return written[match.start(1) :]
    return None


def test_a_call_opens_at_its_marker_anywhere_but_a_fence_or_brace_only_at_the_start():
    assert watch_after().opened(b"  {{") == b"{{"  # the text the grammar would be handed
    assert watch_after(b"\n").opened(b'{"') == b'{"'
    assert watch_after(b"Sure").opened(b" {") is None  # a brace in prose is prose
    assert watch_after(b"``").opened(b"`json\n") == b"```json\n"
    assert watch_after(b"Sure, ", b"<tool").opened(b"_call>{{") == b"<tool_call>{{"
    assert watch_after(b"Sure, ", b"<tool").opened(b"_call") is None
    assert watch_after(b"x" * 50, b"<").opened(b"tool_call>") == b"<tool_call>"


def test_the_mirror_agrees_with_the_patterns_llama_cpp_is_given():
    pieces = [b"", b" ", b"\n", b"{", b"{{", b"``", b"`", b"json", b"<", b"tool", b"_call", b">", b"Hi", b"<tool_call>"]
    for first in pieces:
        for second in pieces:
            for third in pieces:
                written, watch, opened = b"", TriggerWatch(HERMES_TRIGGERS), None
                for piece in (first, second, third):
                    opened = watch.opened(piece)
                    written += piece
                    assert opened == regex_opened(written), (first, second, third)
                    if opened is not None:
                        break
                    watch.advance(piece)


def test_the_key_names_what_decides_the_next_opening():
    # Answers that differ only far back open alike: one key, one cached set of tokens to rule out.
    assert watch_after(b"Hello there ", b"<tool").key() == watch_after(b"Bye ", b"<tool").key()
    assert watch_after(b"Hello").key() != watch_after(b"Hello <").key()
    assert watch_after(b"  ").key() == watch_after().key()  # whitespace only: a call may still open


def test_patterns_escape_what_regex_would_read():
    assert Trigger("{", anywhere=False).pattern() == "^\\s*(\\{)"  # searched: ^ keeps it to the start
    assert Trigger("<tool_call>", anywhere=True).pattern() == "(<tool_call>)"
