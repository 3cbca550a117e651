"""Tool calls constrained by a lazy grammar on the starter pair, in a subprocess (tests/tool_grammar_checks.py:
llama.cpp aborts the process on a grammar misuse): free text before a call, only a JSON call to a
tool offered once it opens, no end of the answer inside one; constrained answers identical with and
without drafting at temperature 0 (lossless), valid calls at 0.7, and what the grammar costs."""

import json
import subprocess
import sys

import pytest

from tests.models import REPO


@pytest.fixture(scope="module")
def checks(qwen_paths):
    run = subprocess.run(
        [sys.executable, "-m", "tests.tool_grammar_checks", *qwen_paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_grammar_waits_for_a_call_then_holds_it_to_the_tools(checks):
    assert checks["before"] == {" check": True, "<eos>": True}  # free text until a call opens
    # A token that would open a call with text no call can have is ruled out (llama.cpp would abort).
    assert checks["start"] == {'"}': False, '",': True, "_": True}
    assert checks["bare"] == {"arguments": True, "city": False}  # a bare call, once it names a tool, is held
    assert checks["prose"] == {"city": True, "Hello": True}
    assert checks["opened"] == {"{": True, "Hello": False, "<eos>": False}
    assert checks["name"] == {"get": True, "set": False, "<eos>": False}  # only a tool offered
    assert checks["after call"] == {"\n": True, "<eos>": True}
    assert checks["after call, single"] == {"\n": False, "<eos>": True}


def test_json_the_user_asked_for_is_not_made_a_call(checks):
    answers = checks["user json"]
    assert '"name": "Ann"' in answers["False"]["text"] and answers["False"]["calls"] == []
    assert answers["True"]["tokens"] == answers["False"]["tokens"] and answers["True"]["calls"] == []


def test_constrained_calls_are_lossless_at_temperature_zero(checks):
    answers = checks["answers"]
    plain = answers["0.0/off/True"]
    drafted = answers["0.0/draft/True"]
    assert plain["calls"] == drafted["calls"] == [["get_weather", {"city": "Paris"}]]
    assert plain["tokens"] == drafted["tokens"] and drafted["accepted"] > 0
    # The model's own call was valid: the grammar changed nothing in it.
    assert answers["0.0/off/False"]["tokens"] == plain["tokens"]
    assert plain["grammar_rows"] >= len(plain["tokens"])


def test_sampled_constrained_calls_parse(checks):
    """At 0.7 the model may answer in words instead; whatever it calls parses, to the tool offered."""
    answers = [checks["answers"]["0.7/off/True"], checks["answers"]["0.7/draft/True"], *checks["sampled"]]
    assert all(a["malformed"] == 0 and all(c[0] == "get_weather" for c in a["calls"]) for a in answers)
    assert sum(bool(a["calls"]) for a in answers) >= len(answers) // 2
    assert all(a["grammar_rows"] > 0 for a in answers)


def test_llama3_and_mistral_calls_have_their_own_grammars(checks):
    """Each family's grammar on the real vocabulary (its markers spelled as text there): free text
    until its marker, then only that family's call to a tool offered, ending where its syntax ends."""
    llama3, mistral = checks["families"]["llama3"], checks["families"]["mistral"]
    assert llama3["before"] == {" check": True, "<eos>": True}
    assert llama3["start"] == {'"}': False, '",': True}
    assert llama3["tagged"] == {'{"': True, "Hello": False, "<eos>": False}
    assert llama3["key"] == {"parameters": True, "arguments": False}  # Llama 3's own key
    assert llama3["after call"] == {"<eos>": True, "{": False, ",": False}  # one call per message
    assert mistral["before"] == {" check": True, "<eos>": True, "{": True}  # a brace is text without the marker
    # After [TOOL_CALLS]: a JSON array of calls, or a tool's name then [ARGS] (the newer form).
    assert mistral["opened"] == {"[": True, "get": True, "set": False, "Hello": False, "<eos>": False}
    assert mistral["named"] == {'{"': True, "Hello": False, "<eos>": False}
    assert mistral["named args"] == {"path": True, "city": False}  # read_file's arguments, not get_weather's
    assert mistral["listed"] == {",": True, "]": True, "<eos>": False}
    assert mistral["listed, single"] == {",": False, "]": True}
    assert mistral["id"] == {"id": True, "name": False}  # v3's optional call id
    assert mistral["after named"] == {"<eos>": True, "[": True, "Hello": False}


def test_forced_calls_in_other_families_syntax_parse_and_stay_lossless(checks):
    """Made to call in Llama 3's or Mistral's syntax though its template asks for Hermes, the model's
    answer is that family's call, parsed by that family's parser, and drafting changes none of it."""
    forced = checks["families"]["forced"]
    for family in ("llama3", "mistral"):
        plain, drafted = forced[f"{family}/off"], forced[f"{family}/draft"]
        assert plain["calls"] == drafted["calls"] == [["get_weather", {"city": "Paris"}]], family
        assert plain["malformed"] == drafted["malformed"] == 0
        assert plain["tokens"] == drafted["tokens"] and drafted["accepted"] > 0, family
