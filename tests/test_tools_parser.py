"""The tool-call parser as a pure function of the streamed text: what is held, what is text, what is a
call, and what is reported as malformed (never repaired)."""

from engine.tools import (
    HERMES,
    LLAMA3,
    MISTRAL,
    QWEN_XML,
    Found,
    MalformedToolCall,
    Span,
    ToolCall,
    ToolCallParser,
    ToolSpec,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def stream(parser, pieces):
    out = []
    for i, piece in enumerate(pieces):
        out.append(parser.push(piece, i))
    out.append(parser.finish())
    return out


def test_text_that_may_start_a_marker_is_held_until_it_is_clear():
    parser = ToolCallParser(HERMES)
    assert [s.text for s in parser.push("Hello <to", 0)] == ["Hello "]
    assert [s.text for s in parser.push("ol", 1)] == []
    out = parser.push("s are fun", 2)
    assert [(s.text, s.call) for s in out] == [("<to", False), ("ol", False), ("s are fun", False)]
    assert parser.text == "Hello <tools are fun" and not parser.calls


def test_spans_keep_their_piece_and_a_piece_is_cut_where_a_call_begins():
    parser = ToolCallParser(HERMES, ["get_weather"])
    outputs = [o for batch in stream(parser, ["Sure.\n<tool", "_call>\n", CALL[12:], "\nDone."]) for o in batch]
    spans = [o for o in outputs if isinstance(o, Span)]
    assert "".join(s.text for s in spans) == "Sure.\n" + CALL + "\nDone."
    assert [(s.item, s.text, s.call) for s in spans[:2]] == [(0, "Sure.\n", False), (0, "<tool", True)]
    found = [o.call for o in outputs if isinstance(o, Found)]
    assert [c.name for c in found] == ["get_weather"] and isinstance(found[0], ToolCall)
    # The call is announced right after its markup, before the text that follows.
    at = outputs.index(next(o for o in outputs if isinstance(o, Found)))
    assert outputs[at - 1].call and not outputs[at + 1].call
    assert parser.text == "Sure.\n\nDone."


def test_a_call_with_broken_json_is_reported_with_its_text():
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>'
    parser = ToolCallParser(HERMES, ["get_weather"])
    stream(parser, [broken])
    assert not parser.calls
    assert parser.malformed == [MalformedToolCall(broken, parser.malformed[0].reason)]
    assert "not valid JSON" in parser.malformed[0].reason


def test_a_call_to_a_tool_not_offered_is_reported():
    parser = ToolCallParser(HERMES, ["search"])
    stream(parser, [CALL])
    assert not parser.calls and "get_weather" in parser.malformed[0].reason and "search" in parser.malformed[0].reason


def test_arguments_that_are_not_an_object_are_reported():
    parser = ToolCallParser(HERMES)
    stream(parser, ['<tool_call>\n{"name": "f", "arguments": [1, 2]}\n</tool_call>'])
    assert "not a JSON object" in parser.malformed[0].reason


def test_arguments_written_as_a_json_string_are_read_as_the_api_writes_them():
    parser = ToolCallParser(HERMES)
    stream(parser, ['<tool_call>\n{"name": "f", "arguments": "{\\"x\\": 1}"}\n</tool_call>'])
    assert parser.calls[0].arguments == {"x": 1}


def test_an_answer_cut_inside_a_call_reports_it():
    parser = ToolCallParser(HERMES)
    stream(parser, ['<tool_call>\n{"name": "f", "argu'])
    assert not parser.calls and parser.malformed and parser.malformed[0].raw == '<tool_call>\n{"name": "f", "argu'


def test_a_complete_call_without_its_closing_tag_is_still_a_call():
    parser = ToolCallParser(HERMES)
    stream(parser, ['<tool_call>\n{"name": "f", "arguments": {}}\n'])
    assert [c.name for c in parser.calls] == ["f"]


def test_llama3_json_that_is_not_a_call_is_the_answer():
    parser = ToolCallParser(LLAMA3, ["get_weather"])
    stream(parser, ['{"city": ', '"Paris"}', " is the JSON you asked for."])
    assert parser.text == '{"city": "Paris"} is the JSON you asked for.' and not parser.calls and not parser.malformed


def test_llama3_json_only_at_the_start_is_a_call():
    parser = ToolCallParser(LLAMA3, ["get_weather"])
    stream(parser, ['Call it like {"name": "get_weather", "parameters": {"city": "Paris"}}'])
    assert not parser.calls and parser.text.startswith("Call it like")


def test_llama3_unfinished_json_at_the_start_is_text():
    parser = ToolCallParser(LLAMA3)
    stream(parser, ['{"a": [1, 2'])
    assert parser.text == '{"a": [1, 2' and not parser.malformed


def test_mistral_name_first_calls_one_after_another():
    parser = ToolCallParser(MISTRAL)
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}'
    stream(parser, list(text))
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert all(len(c.id) == 9 and c.id.isalnum() for c in parser.calls)


def test_mistral_call_without_arguments_is_reported():
    parser = ToolCallParser(MISTRAL)
    stream(parser, ["[TOOL_CALLS]get_weather"])
    assert "before its arguments" in parser.malformed[0].reason


def test_tool_spec_round_trips_openai_shape():
    tool = {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}},
    }
    assert ToolSpec.from_openai(tool).as_openai() == tool
    call = ToolCall("call_1", "f", {"x": "é"})
    assert call.as_openai()["function"]["arguments"] == '{"x": "é"}'
    assert call.for_template()["function"]["arguments"] == {"x": "é"}


def test_a_call_in_a_json_fence_is_a_call_when_it_names_a_tool_offered():
    """Qwen2.5-Coder writes its calls in a ```json fence rather than <tool_call> tags."""
    fenced = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
    parser = ToolCallParser(HERMES, ["get_weather"])
    stream(parser, [fenced[i : i + 4] for i in range(0, len(fenced), 4)])
    assert [(c.name, c.arguments, c.raw) for c in parser.calls] == [("get_weather", {"city": "Paris"}, fenced)]
    assert parser.text == ""


def test_other_json_fences_stay_text():
    for answer in ['Here:\n```json\n{"city": "Paris"}\n```\nDone.', '```json\n{"name": "rm", "arguments": {}}\n```']:
        parser = ToolCallParser(HERMES, ["get_weather"])
        stream(parser, [answer[i : i + 3] for i in range(0, len(answer), 3)])
        assert parser.text == answer and not parser.calls and not parser.malformed


def test_a_bare_call_as_the_whole_answer_is_a_call_when_it_names_a_tool_offered():
    """Qwen2.5-Coder 0.5B writes its calls bare, without tags or a fence."""
    bare = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    parser = ToolCallParser(HERMES, ["get_weather"])
    stream(parser, [bare[i : i + 5] for i in range(0, len(bare), 5)])
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    for answer in ['{"name": "Ada", "arguments": {}}', '{"name": "Ada", "age": 36}', 'I said {"name": "get_weather"}']:
        parser = ToolCallParser(HERMES, ["get_weather"])
        stream(parser, [answer])
        assert parser.text == answer and not parser.calls and not parser.malformed


SEARCH = {
    "search": {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "exact": {"type": "boolean"},
            "paths": {"type": "array"},
        },
    }
}


def xml_call(*parameters: tuple[str, str], name: str = "search") -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_xml_calls_keep_strings_as_written_and_type_the_rest_by_the_schema():
    parser = ToolCallParser(QWEN_XML, ["search"], schemas=SEARCH)
    text = "Looking.\n" + xml_call(
        ("query", 'def main():\n    print("42")'), ("limit", "3"), ("exact", "true"), ("paths", '["a.py", "b.py"]')
    )
    stream(parser, [text[i : i + 5] for i in range(0, len(text), 5)])
    (call,) = parser.calls
    assert call.arguments == {
        "query": 'def main():\n    print("42")',
        "limit": 3,
        "exact": True,
        "paths": ["a.py", "b.py"],
    }
    assert parser.text == "Looking.\n" and call.raw == text[len("Looking.\n") :]
    # A string that looks like a number stays a string; without a schema, JSON other than a string is a value.
    parser = ToolCallParser(QWEN_XML, schemas=SEARCH)
    stream(parser, [xml_call(("query", "404"), ("note", "7"), ("other", "plain words"))])
    assert parser.calls[0].arguments == {"query": "404", "note": 7, "other": "plain words"}


def test_xml_calls_that_break_the_form_or_the_types_are_reported_not_guessed():
    cases = {
        xml_call(("limit", "three")): "limit of search should be integer",
        xml_call(("exact", "1")): "exact of search should be boolean",
        "<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n</tool_call>": "not a <function=name> block",
        "<tool_call>\n<function=search>\nquery: x\n</function>\n</tool_call>": "text outside its <parameter> blocks",
        xml_call(("q", "x"), name="delete_all"): "'delete_all', which is not one of the tools offered",
    }
    for text, reason in cases.items():
        parser = ToolCallParser(QWEN_XML, ["search"], schemas=SEARCH)
        stream(parser, [text])
        assert not parser.calls and len(parser.malformed) == 1 and reason in parser.malformed[0].reason, text
        assert parser.malformed[0].raw == text
