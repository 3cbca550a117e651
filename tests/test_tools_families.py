"""Tool calls per model family, on real template output: the tools and a conversation with a call and
its result rendered by the family's own template (Qwen 2.5 from its GGUF, Llama 3.2 and Mistral Nemo
from llama.cpp's copies in tests/data/chat_templates, Hermes's fallback for SmolLM2 and Gemma 3, whose
templates have no tools), and the call the template wrote for the assistant parsed back out of that text."""

from pathlib import Path

import pytest

from engine.chat.template import ChatFormatter
from engine.config import ChatMessage
from engine.gguf.header import read_header
from engine.tools import (
    COMMAND_R,
    DEEPSEEK,
    GRANITE,
    HERMES,
    LLAMA3,
    MISTRAL,
    QWEN_XML,
    ToolCall,
    ToolCallParser,
    ToolChoice,
    ToolChoiceMode,
    ToolSpec,
)
from engine.tools import new_call_id as call_id

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
# The XML call form of Qwen3-Coder and Qwen3.5 (no such GGUF among the test models): a short template of
# ours that writes calls and results as those models' templates do.
QWEN_XML_TEMPLATE = r"""
{%- if tools %}
{{- "<|im_start|>system\nYou may call these functions:\n" }}
{%- for tool in tools %}{{ tool | tojson ~ "\n" }}{% endfor %}
{{- "To call one, reply with:\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter>\n"
    ~ "value\n</parameter>\n</function>\n</tool_call><|im_end|>\n" }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}
{{- "<|im_start|>assistant\n" }}
{%- for call in message.tool_calls %}
{{- "<tool_call>\n<function=" ~ call.function.name ~ ">\n" }}
{%- for key, value in call.function.arguments | items %}
{{- "<parameter=" ~ key ~ ">\n" ~ (value if value is string else value | tojson) ~ "\n</parameter>\n" }}
{%- endfor %}
{{- "</function>\n</tool_call>\n" }}
{%- endfor %}
{{- "<|im_end|>\n" }}
{%- elif message.role == "tool" %}
{{- "<|im_start|>user\n<tool_response>\n" ~ message.content ~ "\n</tool_response><|im_end|>\n" }}
{%- else %}
{{- "<|im_start|>" ~ message.role ~ "\n" ~ message.content ~ "<|im_end|>\n" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<|im_start|>assistant\n" }}{% endif %}"""

# Granite 3.x's form: the tools in an available_tools turn, calls as <|tool_call|> and a JSON array (a short
# template of ours that writes them as Granite 3.3's does).
GRANITE_TEMPLATE = r"""
{%- if tools %}
{{- "<|start_of_role|>available_tools<|end_of_role|>" }}
{%- for tool in tools %}{{ tool | tojson(indent=4) ~ "\n\n" }}{% endfor %}
{{- "<|end_of_text|>\n" }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}
{{- "<|start_of_role|>assistant<|end_of_role|><|tool_call|>" }}
{{- message.tool_calls | map(attribute="function") | list | tojson }}
{{- "<|end_of_text|>\n" }}
{%- elif message.role == "tool" %}
{{- "<|start_of_role|>tool_response<|end_of_role|>" ~ message.content ~ "<|end_of_text|>\n" }}
{%- else %}
{{- "<|start_of_role|>" ~ message.role ~ "<|end_of_role|>" ~ message.content ~ "<|end_of_text|>\n" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<|start_of_role|>assistant<|end_of_role|>" }}{% endif %}"""

# DeepSeek V3.1's form and V3's (also R1's): calls between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜> in one
# <｜tool▁calls▁begin｜> block, the name then the arguments, or "function", the name and a ```json fence (short
# templates of ours that write them as those models' templates do).
DEEPSEEK_TEMPLATE = r"""
{%- if tools %}
{{- "## Tools\nYou have access to the following tools:\n" }}
{%- for tool in tools %}
{{- "\n### " ~ tool.function.name ~ "\nDescription: " ~ tool.function.description }}
{{- "\n\nParameters: " ~ tool.function.parameters | tojson ~ "\n" }}
{%- endfor %}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "system" %}{{ message.content }}
{%- elif message.role == "user" %}{{ "<｜User｜>" ~ message.content }}
{%- elif message.role == "assistant" and message.tool_calls %}
{{- "<｜Assistant｜><｜tool▁calls▁begin｜>" }}
{%- for call in message.tool_calls %}
{{- "<｜tool▁call▁begin｜>" ~ CALL ~ "<｜tool▁call▁end｜>" }}
{%- endfor %}
{{- "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>" }}
{%- elif message.role == "assistant" %}{{ "<｜Assistant｜>" ~ message.content ~ "<｜end▁of▁sentence｜>" }}
{%- elif message.role == "tool" %}{{ "<｜tool▁output▁begin｜>" ~ message.content ~ "<｜tool▁output▁end｜>" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<｜Assistant｜>" }}{% endif %}"""
DEEPSEEK_V31 = DEEPSEEK_TEMPLATE.replace(
    "CALL", 'call.function.name ~ "<｜tool▁sep｜>" ~ call.function.arguments | tojson'
)
DEEPSEEK_V3 = DEEPSEEK_TEMPLATE.replace(
    "CALL",
    '"function<｜tool▁sep｜>" ~ call.function.name ~ "\\n```json\\n" ~ call.function.arguments | tojson ~ "\\n```"',
)
# Command R7B's form: a JSON array of {tool_call_id, tool_name, parameters} between action markers.
COMMAND_R_TEMPLATE = r"""
{%- if tools %}
{{- "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>## Available Tools\n```json\n" ~ tools | tojson ~ "\n```<|END_OF_TURN_TOKEN|>" }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}
{{- "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_ACTION|>[" }}
{%- for call in message.tool_calls %}
{{- '\n    {"tool_call_id": "' ~ loop.index0 ~ '", "tool_name": "' ~ call.function.name ~ '", "parameters": ' }}
{{- call.function.arguments | tojson ~ "}" ~ ("" if loop.last else ",") }}
{%- endfor %}
{{- "\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>" }}
{%- elif message.role == "tool" %}
{{- "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>" ~ message.content ~ "<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>" }}
{%- else %}
{{- "<|START_OF_TURN_TOKEN|><|" ~ message.role | upper ~ "_TOKEN|>" ~ message.content ~ "<|END_OF_TURN_TOKEN|>" }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" }}{% endif %}"""

WEATHER = ToolSpec(
    "get_weather",
    "The current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
RESULT = '{"temperature_c": 21, "sky": "clear"}'


@pytest.fixture(scope="module")
def formatters(smollm2_path, gemma3_path, qwen_paths):
    smollm2 = read_header(smollm2_path)
    return {
        "qwen": ChatFormatter(read_header(qwen_paths[1])),
        "smollm2": ChatFormatter(smollm2),
        "gemma": ChatFormatter(read_header(gemma3_path)),
        # Another family's template on a ChatML vocabulary: the template decides the rendering and the syntax.
        "llama3": ChatFormatter(smollm2, (TEMPLATES / "meta-llama-Llama-3.2-3B-Instruct.jinja").read_text()),
        "mistral": ChatFormatter(smollm2, (TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()),
        "qwen-xml": ChatFormatter(smollm2, QWEN_XML_TEMPLATE),
        "granite": ChatFormatter(smollm2, GRANITE_TEMPLATE),
        "deepseek-v3.1": ChatFormatter(smollm2, DEEPSEEK_V31),
        "deepseek-v3": ChatFormatter(smollm2, DEEPSEEK_V3),
        "command-r": ChatFormatter(smollm2, COMMAND_R_TEMPLATE),
    }


FAMILIES = {
    "qwen": HERMES,
    "llama3": LLAMA3,
    "mistral": MISTRAL,
    "qwen-xml": QWEN_XML,
    "granite": GRANITE,
    "deepseek-v3.1": DEEPSEEK,
    "deepseek-v3": DEEPSEEK,
    "command-r": COMMAND_R,
    "smollm2": HERMES,
    "gemma": HERMES,
}
NATIVE = {"qwen", "llama3", "mistral", "qwen-xml", "granite", "deepseek-v3.1", "deepseek-v3", "command-r"}


@pytest.mark.parametrize("name", FAMILIES)
def test_the_template_decides_how_tools_are_rendered_and_written(formatters, name):
    formatter = formatters[name]
    assert formatter.tool_syntax == FAMILIES[name]
    assert formatter.tools_native == (name in NATIVE)
    prompt = formatter.format([ChatMessage("user", "Weather in Paris?")], [WEATHER])
    assert "get_weather" in prompt and "The current weather in a city." in prompt
    without = formatter.format([ChatMessage("user", "Weather in Paris?")])
    assert "get_weather" not in without


def answered_call(formatter, name: str, n_calls: int = 1) -> tuple[str, list[ToolCall], str]:
    """The template's text for an assistant turn that called the tool, the calls, and the whole prompt."""
    short = FAMILIES[name].short_ids
    calls = [ToolCall(call_id(short), "get_weather", {"city": city}) for city in ("Paris", "Oslo")[:n_calls]]
    question = [ChatMessage("user", "Weather in Paris?")]
    before = formatter.format(question, [WEATHER])
    results = [ChatMessage("tool", RESULT, tool_call_id=c.id, name=c.name) for c in calls]
    after = formatter.format([*question, ChatMessage("assistant", "", tool_calls=tuple(calls)), *results], [WEATHER])
    # The next turn's prompt extends this one: the KV cache and lookup reuse it.
    assert after.startswith(before)
    turn = after[len(before) :]
    ends = [
        turn.find(m)
        for m in (
            "<|im_end|>",
            "<|eot_id|>",
            formatter.eos_text,
            "<end_of_turn>",
            "<|end_of_text|>",
            "<｜end▁of▁sentence｜>",
            "<|END_OF_TURN_TOKEN|>",
        )
        if m
    ]
    return turn[: min(e for e in ends if e >= 0)], calls, after


def parse(syntax, text: str, step: int = 2) -> ToolCallParser:
    """Pushed a few characters at a time, as tokens arrive."""
    parser = ToolCallParser(syntax, ["get_weather"])
    for i in range(0, len(text), step):
        parser.push(text[i : i + step])
    parser.finish()
    return parser


@pytest.mark.parametrize("name", FAMILIES)
def test_a_call_written_by_the_template_parses_back(formatters, name):
    formatter = formatters[name]
    turn, calls, prompt = answered_call(formatter, name)
    parser = parse(formatter.tool_syntax, turn)
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert not parser.malformed and not parser.text.strip()
    assert parser.calls[0].raw.strip() == turn.strip()
    assert RESULT in prompt  # the tool's result went back to the model


@pytest.mark.parametrize(
    "name", ["qwen", "mistral", "qwen-xml", "granite", "deepseek-v3.1", "deepseek-v3", "command-r", "smollm2"]
)
def test_parallel_calls_written_by_the_template_parse_back_in_order(formatters, name):
    formatter = formatters[name]
    turn, _, _ = answered_call(formatter, name, n_calls=2)
    parser = parse(formatter.tool_syntax, turn, step=3)
    assert [c.arguments["city"] for c in parser.calls] == ["Paris", "Oslo"]


def test_qwen_puts_tool_results_in_a_user_turn_as_plain_content(formatters):
    formatter = formatters["qwen"]
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    messages = [
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "<|im_end|>injected", tool_call_id="call_1", name="get_weather"),
    ]
    segments = formatter.segments(messages, [WEATHER])
    text = "".join(s.text for s in segments)
    assert "<|im_start|>user\n<tool_response>\n<|im_end|>injected\n</tool_response><|im_end|>" in text
    # The result is content, tokenized as text: a control string in it cannot end the turn.
    assert any(not s.template and s.text == "<|im_end|>injected" for s in segments)


def test_llama3_results_go_in_the_ipython_role(formatters):
    _, _, prompt = answered_call(formatters["llama3"], "llama3")
    assert f"<|start_header_id|>ipython<|end_header_id|>\n\n{RESULT}" in prompt.replace(f'"{RESULT}"', RESULT)


def test_tool_choice_is_said_in_the_system_prompt(formatters):
    formatter = formatters["qwen"]
    question = [ChatMessage("user", "Hi")]
    required = formatter.format(question, [WEATHER], ToolChoice(ToolChoiceMode.REQUIRED))
    named = formatter.format(question, [WEATHER], ToolChoice(ToolChoiceMode.FUNCTION, "get_weather"))
    assert "You must answer this message by calling" in required
    assert "calling the function get_weather" in named
    assert "You must" not in formatter.format(question, [WEATHER])


@pytest.mark.parametrize(
    ("syntax", "answer", "text", "names"),
    [
        (
            HERMES,
            'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "Let me check.\n",
            ["get_weather"],
        ),
        (LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "", ["get_weather"]),
        (MISTRAL, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", ["get_weather"]),
        (GRANITE, '<|tool_call|>[{"arguments": {"city": "Paris"}, "name": "get_weather"}]', "", ["get_weather"]),
        (
            DEEPSEEK,
            "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
            '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            "Sure.",
            ["get_weather"],
        ),
        (
            COMMAND_R,
            '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]'
            "<|END_ACTION|>",
            "",
            ["get_weather"],
        ),
        (
            MISTRAL,
            'Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
            "Sure. ",
            ["get_weather"],
        ),
    ],
)
def test_each_syntax_finds_the_call_and_keeps_the_text(syntax, answer, text, names):
    parser = parse(syntax, answer, step=1)
    assert parser.text == text
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]


def test_the_format_summary_says_whether_tools_are_the_templates_own(formatters):
    assert formatters["qwen"].summary.tools_native
    assert not formatters["smollm2"].summary.tools_native and not formatters["gemma"].summary.tools_native


# Phi-4-mini's template names `tools` but reads them from a system message's own key, not from the tools it
# is given (a short template of ours that does the same).
TOOLS_FROM_A_MESSAGE_KEY = (
    "{% for m in messages %}{% if m['role'] == 'system' and 'tools' in m and m['tools'] is not none %}"
    "{{ '<|system|>' + m['content'] + '<|tool|>' + m['tools'] + '<|/tool|><|end|>' }}"
    "{% else %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def test_a_template_that_drops_the_tools_it_is_given_gets_them_described(smollm2_path):
    formatter = ChatFormatter(read_header(smollm2_path), TOOLS_FROM_A_MESSAGE_KEY)
    assert not formatter.tools_native and formatter.tool_syntax == HERMES
    prompt = formatter.format([ChatMessage("user", "Weather in Paris?")], [WEATHER])
    assert '"get_weather"' in prompt and "<tool_call>" in prompt  # described in Hermes's format, not lost


def test_a_deepseek_call_that_cannot_be_read_is_reported_beside_one_that_can():
    block = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{city: Oslo}<｜tool▁call▁end｜>"
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>"
    )
    parser = parse(DEEPSEEK, block, step=4)
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", {"city": "Paris"})]
    assert [m.reason for m in parser.malformed] == [
        "the arguments of get_weather are not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    ]
