"""Tools for a model whose chat template has none: the conversation rewritten in Hermes's style.

Why a fallback rather than a refusal: a template without tools (Gemma 3, SmolLM2, Llama 3.0, a
user's own) cannot say how the model was trained to call, but most instruction-tuned models follow a
described format well enough to be useful, and Hermes's (`<tool_call>` JSON blocks, results in
`<tool_response>`) is the one most open models have seen. ChatFormatter.tools_native says which path
a model takes, so a front end can tell the user that calls are prompted, not trained.

The messages here are the dicts a template renders (role, content, tool_calls, tool_call_id); the
rewrite leaves only system, user and assistant turns with text content, which any template takes.
"""

from __future__ import annotations

import json

from engine.tools.calls import ToolChoice, ToolChoiceMode


def tools_prompt(tools: list[dict]) -> str:
    """The system prompt's description of the tools and of how to call them."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\n"
        "You can call functions to help answer. Their signatures, one JSON object per line:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "To call one, answer with a JSON object naming the function and giving its arguments, "
        "inside <tool_call></tool_call> tags, one block per call:\n"
        '<tool_call>\n{"name": "function_name", "arguments": {"argument": "value"}}\n</tool_call>\n'
        "Each result comes back inside <tool_response></tool_response> tags."
    )


def choice_prompt(choice: ToolChoice) -> str:
    """What tool_choice asks of the model, said in its system prompt ("" for auto)."""
    if choice.mode == ToolChoiceMode.REQUIRED:
        return "You must answer this message by calling one or more of the functions available."
    if choice.mode == ToolChoiceMode.FUNCTION:
        return f"You must answer this message by calling the function {choice.name}."
    return ""


def with_system_text(messages: list[dict], text: str, system_role: bool = True) -> list[dict]:
    """text added to the system prompt (one made if there is none; folded into the first user turn
    when the format has no system role)."""
    if not text:
        return messages
    messages = [dict(m) for m in messages]
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{text}" if messages[0]["content"] else text
    elif system_role or not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "system", "content": text})
    else:
        messages[0]["content"] = f"{text}\n\n{messages[0]['content']}"
    return messages


def rewrite(messages: list[dict], tools: list[dict], system_role: bool = True) -> list[dict]:
    """The conversation in Hermes's style: tools described in the system prompt, an assistant's calls
    written into its content, tool results as a user turn (consecutive results in one)."""
    out: list[dict] = []
    results = False  # the last turn in out is tool results
    for m in messages:
        if m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if results:
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            results = True
            continue
        results = False
        blocks = [_call_block(call) for call in m.get("tool_calls") or ()]
        content = "\n".join(([m["content"]] if m["content"] else []) + blocks)
        out.append({"role": m["role"], "content": content})
    return with_system_text(out, tools_prompt(tools), system_role) if tools else out


def _call_block(call: dict) -> str:
    function = call.get("function", call)
    body = {"name": function["name"], "arguments": function["arguments"]}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"
