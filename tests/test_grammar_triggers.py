"""The lazy tool grammar's triggers, as engine/llama/grammar.py mirrors them: which next piece opens the
grammar and with what text (llama.cpp hands that text to the grammar and aborts if it cannot take it, so
the mirror must agree with llama.cpp's regex_match on the whole answer)."""

import itertools
import re

from engine.decoding.tool_grammar import hermes_triggers
from engine.llama.grammar import StartTrigger, Trigger, TriggerWatch
from engine.tools import ToolSpec

HERMES_TRIGGERS = hermes_triggers([ToolSpec("get_weather", "", {}), ToolSpec("read_file", "", {})])


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


def test_a_call_opens_at_its_marker_anywhere_but_unmarked_only_at_the_start_naming_a_tool():
    assert watch_after().opened(b'  {"name": "get_weather"') == b'{"name": "get_weather"'  # the grammar's text
    assert watch_after(b"\n", b'{"name":').opened(b' "read_file", "') == b'{"name": "read_file", "'
    assert (
        watch_after(b"``", b"`json\n{\n  ").opened(b'"name": "get_weather"') == b'```json\n{\n  "name": "get_weather"'
    )
    assert watch_after(b"Sure, ", b"<tool").opened(b"_call>{{") == b"<tool_call>{{"
    assert watch_after(b"Sure, ", b"<tool").opened(b"_call") is None
    assert watch_after(b"x" * 50, b"<").opened(b"tool_call>") == b"<tool_call>"


def test_json_the_user_asked_for_opens_nothing():
    # A bare brace or fence, or an object whose first key is "name" but not a tool's, is the answer's text.
    assert watch_after().opened(b"{{") is None
    assert watch_after(b"```json\n").opened(b"{") is None
    assert watch_after(b'{\n  "name": "').opened(b'Ann"') is None
    assert watch_after(b'{"name": "get_weather').opened(b'_forecast"') is None
    assert watch_after(b"Sure").opened(b' {"name": "get_weather"') is None  # a call in prose is prose
    assert watch_after(b'{"city": "Paris", ').key() == watch_after(b"Hello").key()  # nothing can open now


def test_the_mirror_agrees_with_the_patterns_llama_cpp_is_given():
    pieces = [b"", b"\n", b"{", b"{\n ", b"```json\n", b'"name"', b": ", b':"', b'"get_weather"', b'"read_', b'file"}']
    pieces += [b"Hi", b"<tool", b"_call>"]
    for parts in itertools.product(pieces, repeat=4):
        written, watch, opened = b"", TriggerWatch(HERMES_TRIGGERS), None
        for piece in parts:
            opened = watch.opened(piece)
            written += piece
            assert opened == regex_opened(written), parts
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
    # One group of choices per slot: spelled out, thousands of tools' alternatives would pass libstdc++'s
    # limit of regex states, which aborts the process.
    start = StartTrigger((("{", "```json\n{"), ("", "\n  "), ('"name": ',), ('"a.b"', '"c"')))
    assert start.pattern() == '^\\s*((?:\\{|```json\n\\{)(?:|\n  )(?:"name": )(?:"a\\.b"|"c"))'
    assert len(start.literals()) == 8 and start.literals()[0] == Trigger('{"name": "a.b"', anywhere=False)
