"""Run in a subprocess by tests/test_tool_grammar.py (a grammar made to accept a token it forbids
aborts the process in llama.cpp): the tool-call grammar on the starter pair.

    python -m tests.tool_grammar_checks TARGET DRAFT

Prints one JSON line: what the grammar allows at a few points of a call on the real vocabulary,
and per temperature and drafting mode the tool calls of one answer, its tokens and the grammar's
cost.
"""

from __future__ import annotations

import json
import sys

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import TokenEvent
from engine.decoding.tool_grammar import make_tool_grammar
from engine.tools import HERMES, LLAMA3, MISTRAL, ToolChoice, ToolChoiceMode, ToolSpec, ToolSyntax

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
)
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
SYSTEM = (
    "You are a helpful assistant. Use the tools when needed, "
    "then answer the user in plain words from the tool's result."
)
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
QUESTION = [ChatMessage("system", SYSTEM), ChatMessage("user", "What is the weather like in Paris right now?")]


def allowed(
    engine: Engine, written: str, candidates: list[str], syntax: ToolSyntax = HERMES, **kinds
) -> dict[str, bool]:
    """After the answer so far is `written`, which candidate texts may come next (each one token).
    kinds: make_tool_grammar's forced and single. Another family's grammar runs on this vocabulary
    too: its markers are then plain text of several tokens."""
    grammar = make_tool_grammar(engine.target.grammar_pieces, syntax, [WEATHER, READ], **kinds)
    try:
        for token in engine.prompt_tokenizer.plain(written):
            grammar.accept(token)
        out = {}
        for text in candidates:
            (token,) = (
                engine.prompt_tokenizer.plain(text)
                if text != "<eos>"
                else [engine.target.info.tokens.index("<|im_end|>")]
            )
            out[text] = grammar.allows(token)
        return out
    finally:
        grammar.close()


def answer(engine: Engine, temperature: float, mode: DrafterMode, grammar: bool, seed: int = 5) -> dict:
    sampling = SamplingParams(temperature=temperature, max_tokens=100, seed=seed)
    # Above 0, a fixed draft (length and confidence floor) as the server's seeded requests use: the
    # adaptive choice follows wall-clock costs, and another cut draws the seeded numbers differently.
    spec = SpecParams(mode=mode, draft_length=4, draft_p_min=0.0) if temperature else SpecParams(mode=mode)
    return outcome(list(engine.chat(QUESTION, sampling, spec, tools=[WEATHER], tool_grammar=grammar)))


def outcome(events: list) -> dict:
    """An answer's calls, its tokens and what drafting and the grammar did."""
    done = events[-1]
    return {
        "calls": [[c.name, c.arguments] for c in done.tool_calls],
        "malformed": len(done.malformed_calls),
        "tokens": [e.token for e in events if isinstance(e, TokenEvent)],
        "accepted": done.stats.n_accepted,
        "grammar_s": done.stats.grammar_s,
        "grammar_rows": done.stats.n_grammar_rows,
    }


def user_json(engine: Engine) -> dict:
    """An answer the user asked to be JSON, with a tool offered: the grammar must leave it alone (it
    once forced the answer's first `{` into a call to get_weather)."""
    question = [
        ChatMessage("system", SYSTEM),
        ChatMessage("user", 'Reply with only a JSON object with the keys "name" and "age" for Ann, who is 31.'),
    ]
    sampling = SamplingParams(temperature=0.0, max_tokens=40)
    out = {}
    for grammar in (False, True):
        events = list(
            engine.chat(question, sampling, SpecParams(mode=DrafterMode.OFF), tools=[WEATHER], tool_grammar=grammar)
        )
        out[str(grammar)] = outcome(events) | {"text": "".join(e.text for e in events if isinstance(e, TokenEvent))}
    return out


def forced(engine: Engine, syntax: ToolSyntax, mode: DrafterMode) -> dict:
    """At temperature 0, an answer made to call a tool in another family's syntax (the model's own
    template asks for Hermes calls): the grammar alone makes it that family's call."""
    own, engine.formatter.tool_syntax = engine.formatter.tool_syntax, syntax
    try:
        sampling = SamplingParams(temperature=0.0, max_tokens=60)
        required = ToolChoice(ToolChoiceMode.REQUIRED)
        events = engine.chat(
            QUESTION, sampling, SpecParams(mode=mode), tools=[WEATHER], tool_choice=required, tool_grammar=True
        )
        return outcome(list(events))
    finally:
        engine.formatter.tool_syntax = own


def families(engine: Engine) -> dict:
    """Llama 3.x's and Mistral's grammars: what they allow, and forced calls drafted and plain."""
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    listed = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}'
    named = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    return {
        "llama3": {
            "before": allowed(engine, "Let me", [" check", "<eos>"], LLAMA3),
            "start": allowed(engine, '{"name": "get_weather', ['"}', '",'], LLAMA3),
            "tagged": allowed(engine, "<|python_tag|>", ['{"', "Hello", "<eos>"], LLAMA3),
            "key": allowed(engine, '{"name": "get_weather", "', ["parameters", "arguments"], LLAMA3),
            "after call": allowed(engine, call, ["<eos>", "{", ","], LLAMA3),
        },
        "mistral": {
            "before": allowed(engine, "Let me", [" check", "<eos>", "{"], MISTRAL),
            "opened": allowed(engine, "[TOOL_CALLS]", ["[", "get", "set", "Hello", "<eos>"], MISTRAL),
            "named": allowed(engine, "[TOOL_CALLS]get_weather[ARGS]", ['{"', "Hello", "<eos>"], MISTRAL),
            "named args": allowed(engine, '[TOOL_CALLS]read_file[ARGS]{"', ["path", "city"], MISTRAL),
            "listed": allowed(engine, listed, [",", "]", "<eos>"], MISTRAL),
            "listed, single": allowed(engine, listed, [",", "]"], MISTRAL, single=True),
            "id": allowed(engine, listed[:-1] + ', "', ["id", "name"], MISTRAL),
            "after named": allowed(engine, named, ["<eos>", "[", "Hello"], MISTRAL),
        },
        "forced": {
            f"{syntax.name}/{mode.value}": forced(engine, syntax, mode)
            for syntax in (LLAMA3, MISTRAL)
            for mode in (DrafterMode.OFF, DrafterMode.DRAFT_MODEL)
        },
    }


def main(target: str, draft: str) -> None:
    engine = Engine(ModelSpec(target, n_ctx=4096), ModelSpec(draft, n_ctx=4096))
    try:
        result = {
            "before": allowed(engine, "Let me", [" check", "<eos>"]),
            # A bare object naming a tool opens a call at the start; a token that would hand the grammar a
            # call with no arguments is ruled out, as llama.cpp would abort on it.
            "start": allowed(engine, '{"name": "get_weather', ['"}', '",', "_"]),
            "bare": allowed(engine, '{"name": "get_weather", "', ["arguments", "city"]),
            "user json": user_json(engine),
            "prose": allowed(engine, "Pass it as {", ["city", "Hello"]),  # a brace in prose opens nothing
            "opened": allowed(engine, "<tool_call>\n", ["{", "Hello", "<eos>"]),
            "name": allowed(engine, '<tool_call>\n{"name": "', ["get", "set", "<eos>"]),
            # After one call: another may follow, unless the grammar allows one only (parallel_tool_calls off).
            "after call": allowed(engine, CALL, ["\n", "<eos>"], forced=True),
            "after call, single": allowed(engine, CALL, ["\n", "<eos>"], forced=True, single=True),
            "answers": {
                f"{t}/{mode.value}/{g}": answer(engine, t, mode, g)
                for t in (0.0, 0.7)
                for mode in (DrafterMode.OFF, DrafterMode.DRAFT_MODEL)
                for g in (False, True)
            },
            "families": families(engine),
            "sampled": [
                answer(engine, 0.7, mode, True, seed)
                for mode in (DrafterMode.OFF, DrafterMode.DRAFT_MODEL)
                for seed in (1, 2, 3)
            ],
        }
    finally:
        engine.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
