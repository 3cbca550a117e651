"""The local server's tools, driven by the official `openai` client over loopback on the starter pair
(Qwen2.5-Coder 1.5B drafted by 0.5B, at temperature 0): a real loop where the client offers a tool,
the model calls it, the client runs it and sends the result, and the model answers from it; streamed
in OpenAI's delta format; tool_choice; the requests refused with a 400 naming the field."""

import json
import threading

import openai
import pytest

from engine.config import ModelSpec
from engine.serving.config import ServerConfig

KEY = "tools-key"
WAIT_S = 120
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
# The prompt that makes the 1.5B model call, then answer from the result (tests/test_tools_engine.py).
SYSTEM = (
    "You are a helpful assistant. Use the tools when needed, "
    "then answer the user in plain words from the tool's result."
)
QUESTION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the weather like in Paris right now?"},
]


def get_weather(city: str) -> str:
    """The client's side of the tool."""
    return json.dumps({"city": city, "temperature_c": 21, "sky": "clear"})


@pytest.fixture(scope="module")
def served(qwen_paths):
    from engine import Engine
    from engine.serving.server import serve_engine

    target, draft = qwen_paths
    engine = Engine(ModelSpec(target, n_ctx=4096), ModelSpec(draft, n_ctx=4096))
    running = serve_engine(engine, ServerConfig(port=0, api_key=KEY))
    yield running
    assert running.close()
    engine.close()
    assert not any(t.name in ("specula-server", "specula-engine") and t.is_alive() for t in threading.enumerate())


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served.url, api_key=KEY, max_retries=0, timeout=WAIT_S)


def ask(client, messages, **kwargs):
    return client.chat.completions.create(
        model="", messages=messages, tools=[WEATHER], temperature=0, max_tokens=120, **kwargs
    )


def test_a_tool_loop_through_the_openai_client(client):
    messages = list(QUESTION)
    first = ask(client, messages)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert arguments == {"city": "Paris"}
    assert not choice.message.content  # the call's markup is not content
    # The client runs the tool and sends its result back with the call that asked for it.
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)},
    ]
    second = ask(client, messages)
    answer = second.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "21" in answer.message.content and "Paris" in answer.message.content


def test_a_streamed_call_arrives_as_tool_call_deltas(client):
    chunks = list(ask(client, list(QUESTION), stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not "".join(d.content or "" for d in deltas)
    parts = [p for d in deltas for p in d.tool_calls or ()]
    assert {p.index for p in parts} == {0}
    assert parts[0].id.startswith("call_") and parts[0].function.name == "get_weather"
    arguments = "".join(p.function.arguments or "" for p in parts)
    assert json.loads(arguments) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    whole = ask(client, list(QUESTION)).choices[0].message.tool_calls[0]
    assert (whole.function.name, whole.function.arguments) == (parts[0].function.name, arguments)


def test_tool_choice_none_answers_without_calling(client):
    answer = ask(client, list(QUESTION), tool_choice="none").choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls and answer.message.content


def test_a_named_function_is_called(client):
    answer = ask(client, list(QUESTION), tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert answer.choices[0].message.tool_calls[0].function.name == "get_weather"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0]"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
        ({"functions": [WEATHER["function"]]}, "functions"),
        (
            {
                "messages": [
                    *QUESTION,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{"}}
                        ],
                    },
                ]
            },
            "messages[2].tool_calls[0].function.arguments",
        ),
    ],
)
def test_bad_tool_requests_are_refused_naming_the_field(client, fields, param):
    request = {"model": "", "messages": QUESTION, "tools": [WEATHER], "max_tokens": 8} | fields
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**request)
    assert refused.value.body["param"] == param


def test_json_asked_for_with_tools_offered_stays_the_answer(client):
    """auto is held to the tools' schemas from where a call opens; JSON the user asked for opens none."""
    ann = 'Reply with only a JSON object with the keys "name" and "age" for Ann, who is 31.'
    answer = ask(client, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ann}]).choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert '"name": "Ann"' in answer.message.content


def test_required_is_asked_of_the_model(client):
    answer = ask(client, list(QUESTION), tool_choice="required").choices[0]
    assert answer.finish_reason == "tool_calls" and answer.message.tool_calls[0].function.name == "get_weather"


def test_required_is_forced_by_the_grammar(client):
    """Unconstrained, the model writes the haiku; required holds its answer to calls from the first token."""
    haiku = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Write a haiku about the sea."}]
    assert not ask(client, haiku).choices[0].message.tool_calls
    answer = ask(client, haiku, tool_choice="required").choices[0]
    assert answer.finish_reason == "tool_calls" and answer.message.tool_calls[0].function.name == "get_weather"
    assert "city" in json.loads(answer.message.tool_calls[0].function.arguments)  # its schema's required field


def test_required_without_a_call_is_a_clear_error():
    """An answer that ends without the call required (a stop string cut it short) is a 422 saying so."""
    from engine import DoneEvent, FinishReason, SamplingParams, SpecParams, ToolChoice, ToolChoiceMode
    from engine.decoding.stats import AnswerStats
    from engine.serving.generation import Generation
    from engine.serving.openai_api import missing_call

    done = DoneEvent(FinishReason.STOP, AnswerStats(), "Waves fold into foam")
    required = Generation((), "", SamplingParams(), SpecParams(), tool_choice=ToolChoice(ToolChoiceMode.REQUIRED))
    error = missing_call(done, required)
    assert error.status == 422 and error.code == "tool_call_missing" and "Waves fold" in error.message
    assert missing_call(done, Generation((), "", SamplingParams(), SpecParams(), tool_choice=ToolChoice())) is None


def test_parallel_tool_calls_false_returns_the_first_call_only():
    from engine import DoneEvent, FinishReason, SpecParams, ToolCall
    from engine.decoding.stats import AnswerStats
    from engine.serving.openai_api import Shaper

    calls = tuple(ToolCall(f"call_{i}", "get_weather", {"city": c}) for i, c in enumerate(("Paris", "Oslo")))
    done = DoneEvent(FinishReason.TOOL_CALLS, AnswerStats(), "", tool_calls=calls)
    one = Shaper(True, "m", parallel_tool_calls=False)
    assert [c["id"] for c in one.whole(done, SpecParams(), 0.0)["choices"][0]["message"]["tool_calls"]] == ["call_0"]
    assert len(one.tool_call_chunks(calls[0])) == 2 and one.tool_call_chunks(calls[1]) == []
    both = Shaper(True, "m").whole(done, SpecParams(), 0.0)["choices"][0]
    assert [c["function"]["arguments"] for c in both["message"]["tool_calls"]] == [
        '{"city": "Paris"}',
        '{"city": "Oslo"}',
    ]
    assert both["finish_reason"] == "tool_calls" and both["message"]["content"] is None
