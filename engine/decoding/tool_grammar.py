"""Tool calls constrained by a lazy grammar, verified losslessly.

Once the model opens a call (`<tool_call>`, or at the very start of its answer a JSON object, bare or
in a ```json fence, whose first key names a tool offered) the call must be a JSON object naming one of
the tools offered, with arguments that follow the tool's JSON schema (llama-cpp-python's schema
converter writes the rules). Hermes (Qwen, Hermes, the fallback), Llama 3.x and Mistral (both of its
forms) have a grammar each; Qwen3-Coder's XML form has none (its values are raw text, not JSON).

Lossless: each verified position's logits are masked by the grammar in the state the draft tokens
before it would leave it (a copy per position), the verification rule then runs on the masked rows
as plain constrained decoding would sample them, and the grammar keeps only the copy of the accepted
prefix, advanced by the round's own token. A draft token the grammar forbids has probability zero,
so it is rejected like any other wrong guess. At temperature 0 a row is masked only when its argmax
is forbidden (llama.cpp's sampler does the same): the argmax the grammar allows is all that counts.
Above it, with top-k on, only the best candidates are checked (a few times k): the top k the grammar
allows among them are the top k it allows at all, which is all the sampler keeps; with min-p on, a
token less likely than all of them is also below min-p of the best one allowed, so they are enough
then too. The whole vocabulary (some 150,000 token texts for Qwen, about 10 ms a row here) is
checked only when neither holds. Plain decoding goes through the same function, so this is exactly
what it samples from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

import numpy as np
from llama_cpp.llama_grammar import SchemaConverter

from engine.llama.grammar import Grammar, StartTrigger, Trigger, VocabPieces
from engine.tools import HERMES, LLAMA3, MISTRAL, ToolSpec, ToolSyntax

# JSON whitespace as models write it (the converter's own rule allows one space only).
_SPACE = 'space ::= | " " | "\\n" [ \\t]{0,20}'


def _converter() -> SchemaConverter:
    # Keys in the order each family's prompts show them.
    order = {"name": 0, "arguments": 1, "parameters": 1, "id": 2}
    return SchemaConverter(prop_order=order, allow_fetch=False, dotall=False, raw_pattern=False)


def _call_rule(
    converter: SchemaConverter, tools: Sequence[ToolSpec], arguments: str, extra: dict | None = None
) -> None:
    """Adds the rule `call`: a JSON object naming one of the tools, its arguments under the key
    `arguments` following that tool's schema (extra: optional keys after them)."""
    schema = {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t.name},
                    arguments: t.parameters or {"type": "object"},
                    **(extra or {}),
                },
                "required": ["name", arguments],
            }
            for t in tools
        ]
    }
    converter.visit(converter.resolve_refs(schema, "stdin"), "call")


def _grammar(converter: SchemaConverter, *rules: str) -> str:
    converted = [_SPACE if r.startswith("space ::=") else r for r in converter.format_grammar().splitlines()]
    return "\n".join([*rules, *converted])


def hermes_gbnf(tools: Sequence[ToolSpec], forced: bool = False, single: bool = False) -> str:
    """The grammar of one or more <tool_call> blocks, one ```json fence or one bare object, each a call to
    a tool offered (forced: the answer is <tool_call> blocks and nothing else; single: one call at most)."""
    converter = _converter()
    _call_rule(converter, tools, "arguments")
    return _grammar(
        converter,
        "root ::= tagged" + ("" if single else ' ( "\\n"* tagged )*') + ("" if forced else " | fenced | call"),
        'tagged ::= "<tool_call>" space call space "</tool_call>"',
        'fenced ::= "```json" space call space "```"',
    )


def llama3_gbnf(tools: Sequence[ToolSpec]) -> str:
    """Llama 3.x: one JSON object {"name": ..., "parameters": {...}} as the whole answer, after
    <|python_tag|> or bare (its templates take one call per message, so one is all the grammar allows)."""
    converter = _converter()
    _call_rule(converter, tools, "parameters")
    return _grammar(converter, 'root ::= "<|python_tag|>" space call | call')


def mistral_gbnf(tools: Sequence[ToolSpec], single: bool = False) -> str:
    """Mistral: [TOOL_CALLS] then a JSON array of {"name", "arguments", "id"?} objects (v3), or
    [TOOL_CALLS]name[ARGS]{...} once per call (v11 and later: Nemo's successors, Small 3.2, Devstral).
    Both forms are allowed: which one a model writes is its template's business, and the parser reads both."""
    converter = _converter()
    _call_rule(converter, tools, "arguments", {"id": {"type": "string"}})
    named = []
    for i, t in enumerate(tools):
        args = converter.visit(converter.resolve_refs(t.parameters or {"type": "object"}, "stdin"), f"args-{i}")
        named.append(f"{json.dumps('[TOOL_CALLS]' + t.name)} {json.dumps('[ARGS]')} {args}")
    listed = "call" if single else 'call ( "," space call )*'
    return _grammar(
        converter,
        "root ::= listed | named" + ("" if single else "+"),
        f'listed ::= "[TOOL_CALLS]" space "[" space {listed} "]" space',
        "named ::= " + " | ".join(f"( {n} )" for n in named),
    )


# Where a call begins without its family's marker: a JSON object at the very start of the answer (or in a
# ```json fence there, for Hermes) whose first key names a tool offered, spaced as models space JSON. Not
# at a bare `{` or fence: an answer the user asked to be JSON would be forced into a call.
_BRACE_SPACING = ("", " ", "\n", "\n  ", "\n    ", "\n\t")


def _unmarked_call(tools: Sequence[ToolSpec], starts: tuple[str, ...]) -> StartTrigger:
    names = tuple(json.dumps(t.name) for t in tools)
    return StartTrigger((starts, _BRACE_SPACING, ('"name":',), ("", " "), names))


def hermes_triggers(tools: Sequence[ToolSpec]) -> tuple[Trigger | StartTrigger, ...]:
    """<tool_call> anywhere; a call object, bare or fenced, only as the answer."""
    return Trigger("<tool_call>", anywhere=True), _unmarked_call(tools, ("{", "```json\n{"))


def llama3_triggers(tools: Sequence[ToolSpec]) -> tuple[Trigger | StartTrigger, ...]:
    return Trigger("<|python_tag|>", anywhere=True), _unmarked_call(tools, ("{",))


MISTRAL_TRIGGERS = (Trigger("[TOOL_CALLS]", anywhere=True),)


def make_tool_grammar(
    vocab: VocabPieces, syntax: ToolSyntax, tools: Sequence[ToolSpec], forced: bool = False, single: bool = False
) -> Grammar | None:
    """A lazy grammar for these tools' calls in this family's syntax, or None without tools or for a
    syntax it does not know. forced (tool_choice required, or a named function): not lazy, the answer
    must be calls from its first token. single: the answer ends after one call."""
    if not tools:
        return None
    if syntax == HERMES:
        gbnf, triggers = hermes_gbnf(tools, forced, single), hermes_triggers(tools)
    elif syntax == LLAMA3:
        gbnf, triggers = llama3_gbnf(tools), llama3_triggers(tools)
    elif syntax == MISTRAL:
        gbnf, triggers = mistral_gbnf(tools, single), MISTRAL_TRIGGERS
    else:
        return None
    return Grammar(vocab, gbnf) if forced else Grammar(vocab, gbnf, triggers)


def _masked(state: Grammar, row: np.ndarray, top_k: int, min_p: float) -> np.ndarray:
    """row with what the grammar forbids at -inf, as far as a top-k or min-p sampler can tell (see above)."""
    n = len(row)
    m = max(4 * top_k, 256)
    if (top_k > 0 or min_p > 0.0) and m < n:
        ids = np.argpartition(row, n - m)[n - m :]
        kept = state.mask_ids(row, ids)
        allowed = np.isfinite(kept)
        enough = top_k > 0 and allowed.sum() >= top_k
        below = allowed.any() and min_p > 0.0 and row[ids].min() - kept[allowed].max() < np.log(min_p)
        if enough or below:
            out = np.full(n, -np.inf, dtype=np.float32)
            out[ids] = kept
            return out
    return state.mask(row)


class GrammarTrack:
    """The grammar through an answer's verification rounds; its cost measured."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self._states: list[Grammar] = []
        self.seconds = 0.0  # spent masking and advancing
        self.n_rows = 0  # verified positions it looked at

    def constrain(
        self,
        logits: np.ndarray,
        drafts: list[int],
        greedy: bool,
        is_eog: Callable[[int], bool],
        top_k: int = 0,
        min_p: float = 0.0,
    ):
        """The round's logits as the grammar allows them, one state per position along the draft."""
        t0 = time.perf_counter()
        out = logits
        self._states = [self.grammar]
        for i in range(len(drafts) + 1):
            state, row = self._states[i], logits[i]
            self.n_rows += 1
            if not (greedy and state.allows(int(np.argmax(row)))):
                if out is logits:
                    out = np.array(logits, dtype=np.float32)
                out[i] = _masked(state, row, 0 if greedy else top_k, 0.0 if greedy else min_p)
            if i == len(drafts) or is_eog(drafts[i]) or not np.isfinite(out[i][drafts[i]]):
                break  # the draft ends here, or is rejected here whatever the rule says
            if greedy and drafts[i] != int(np.argmax(out[i])):
                break
            after = state.clone()
            after.accept(drafts[i])
            self._states.append(after)
        self.seconds += time.perf_counter() - t0
        return out

    def commit(self, n_accepted: int, next_token: int, is_eog: Callable[[int], bool]) -> None:
        """Keep the state after the accepted drafts, advanced by the round's own token."""
        t0 = time.perf_counter()
        if n_accepted < len(self._states):
            kept = self._states[n_accepted]
            if not is_eog(next_token):
                kept.accept(next_token)
        else:  # an accepted end of generation ended the draft: nothing follows it
            kept = self._states[-1]
        if kept is not self.grammar:
            self.grammar.take(kept)
        for state in self._states[1:]:
            state.close()
        self._states = []
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        for state in self._states[1:]:
            state.close()
        self.grammar.close()
