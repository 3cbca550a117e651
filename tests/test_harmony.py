"""gpt-oss's harmony format: an answer in channels (analysis, final, commentary), split as it streams, and
its tool calls read from the header of a message to functions.NAME.

No gpt-oss GGUF can be fetched here (its smallest is 12 GB). HARMONY_TEMPLATE is ours: it writes
conversations as gpt-oss's own template does (the tools in a developer message, each call as
`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`, its result from
`functions.NAME to=assistant`). On SmolLM2's vocabulary the markers are text, several tokens each, so a
marker split across tokens and drafts is what the splitter meets."""

import pytest

from engine.chat.harmony import HarmonySplitter, is_harmony
from engine.chat.template import ChatFormatter
from engine.chat.textstream import Piece
from engine.config import ChatMessage, DrafterMode, SamplingParams, SpecParams
from engine.decoding.events import DoneEvent, FinishReason, TokenEvent
from engine.gguf.header import read_header
from engine.tools import HARMONY, ToolCall, ToolCallParser, ToolSpec, detect

HARMONY_TEMPLATE = r"""
{%- if tools %}
{{- "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n" }}
{%- for tool in tools %}
{{- "// " + tool.function.description + "\ntype " + tool.function.name + " = (_: " + tool.function.parameters | tojson + ") => any;\n\n" }}
{%- endfor %}
{{- "} // namespace functions<|end|>" }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}
{%- for call in message.tool_calls %}
{{- "<|start|>assistant to=functions." + call.function.name + "<|channel|>commentary json<|message|>" }}
{{- call.function.arguments | tojson + "<|call|>" }}
{%- endfor %}
{%- elif message.role == "assistant" %}
{{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}
{%- elif message.role == "tool" %}
{{- "<|start|>functions." + message.name + " to=assistant<|channel|>commentary<|message|>" + message.content + "<|end|>" }}
{%- else %}
{{- "<|start|>" + message.role + "<|message|>" + message.content + "<|end|>" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<|start|>assistant" }}{% endif %}"""

WEATHER = ToolSpec(
    "get_weather",
    "The current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
THINKING = "The user asks for the weather. I should call get_weather."
ANSWERED = f"<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>final<|message|>It is 21 °C."
CALLS = {
    "recipient after the channel": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
    "recipient before the channel": ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}',
}


def split(text: str, step: int):
    """text pushed step characters at a time; (thinking, answer, the parser of the answer's text)."""
    splitter = HarmonySplitter()
    pieces = [Piece(i, text[i : i + step], None) for i in range(0, len(text), step)]
    parts = splitter.push_all(pieces, final=True)
    parser = ToolCallParser(HARMONY, ["get_weather"])
    for part in parts:
        if not part.reasoning:
            parser.push(part.piece.text)
    parser.finish()
    answer = "".join(p.piece.text for p in parts if not p.reasoning)
    return splitter.reasoning, answer, parser


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_the_analysis_channel_is_thinking_and_the_final_channel_the_answer(step):
    thinking, answer, parser = split(ANSWERED, step)
    assert (thinking, answer) == (THINKING, "It is 21 °C.")
    assert parser.text == answer and not parser.calls


@pytest.mark.parametrize("step", [1, 3, 1000])
@pytest.mark.parametrize("form", CALLS)
def test_a_message_to_a_function_is_a_tool_call_in_either_header_form(form, step):
    preamble = "<|channel|>commentary<|message|>Let me look that up.<|end|><|start|>assistant"
    thinking, _, parser = split(f"<|channel|>analysis<|message|>{THINKING}<|end|>{preamble}{CALLS[form]}", step)
    assert thinking == THINKING
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert parser.text == "Let me look that up." and not parser.malformed  # the preamble to no one is the answer's


def test_an_answer_without_headers_is_all_answer():
    for text in ("Hello <b>there</b>", "assistant means helper", "to be or not to be"):
        assert split(text, 2)[:2] == ("", text)


def test_an_answer_cut_inside_a_header_shows_none_of_the_header():
    assert split("<|channel|>analysis<|message|>Hmm<|end|><|start|>assistant<|chan", 4)[:2] == ("Hmm", "")


def test_a_result_message_written_by_the_model_is_not_a_call():
    """A message from functions.NAME (a tool's result, which the model should never write) calls nothing."""
    _, answer, parser = split('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"t": 21}', 5)
    assert not parser.calls and answer == '{"t": 21}'


def test_gpt_oss_is_recognised_by_its_vocabulary_or_its_template():
    assert is_harmony("gpt-oss", None) and is_harmony(None, HARMONY_TEMPLATE) and not is_harmony("chatml", "")
    assert detect(None, (), "gpt-oss") == HARMONY and detect(HARMONY_TEMPLATE) == HARMONY


def test_a_call_written_by_the_template_parses_back(smollm2_path):
    formatter = ChatFormatter(read_header(smollm2_path), HARMONY_TEMPLATE)
    assert formatter.harmony and formatter.tools_native and formatter.tool_syntax == HARMONY
    assert not formatter.keeps_reasoning  # earlier turns' analysis is not sent back, as gpt-oss's template does
    question = [ChatMessage("user", "Weather in Paris?")]
    before = formatter.format(question, [WEATHER])
    assert "type get_weather = (_: " in before and before.endswith("<|start|>assistant")
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    after = formatter.format([*question, ChatMessage("assistant", "", tool_calls=(call,))], [WEATHER])
    turn = after[len(before) :].split("<|call|>")[0]
    _, answer, parser = split(turn, 3)
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert not parser.text


# Three earlier calls: SmolLM2 copies the call at temperature 0 (it does not write an analysis message of its
# own, so the thinking is tested above on text).
CALLED = ToolCall("call_1", "get_weather", {"city": "Paris"})
RESULT = ChatMessage("tool", '{"temperature_c": 21}', tool_call_id="call_1", name="get_weather")
REPEATED = [
    ChatMessage("user", "Weather in Paris?"),
    *[ChatMessage("assistant", "", tool_calls=(CALLED,)), RESULT] * 3,
    ChatMessage("user", "Weather in Paris?"),
]


@pytest.mark.parametrize("mode", [DrafterMode.OFF, DrafterMode.LOOKUP])
def test_a_real_model_writing_harmony_calls_a_tool_and_shows_no_markup(small_engine, mode):
    small_engine.set_chat_template(HARMONY_TEMPLATE)
    try:
        # gpt-oss ends a call with its end-of-generation token <|call|>; here it is text, so a stop string.
        sampling = SamplingParams(temperature=0.0, max_tokens=48, stop=("<|call|>",))
        events = list(small_engine.chat(REPEATED, sampling, SpecParams(mode=mode), tools=[WEATHER]))
    finally:
        small_engine.set_chat_template(None)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert [(c.name, c.arguments) for c in done.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert done.finish_reason == FinishReason.TOOL_CALLS and done.text == ""
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert tokens and all(e.tool_call for e in tokens)  # all of it is the call's markup: nothing shown as text
    # What came before the recipient in the header was never passed on.
    assert "".join(e.text for e in tokens).startswith("to=functions.get_weather")
