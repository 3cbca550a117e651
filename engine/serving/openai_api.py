"""OpenAI's request and response shapes: requests checked into Generations, answers shaped back.

Only what the engine honours is accepted: temperature, top_p, max_tokens (max_completion_tokens),
stop, seed, stream (with stream_options.include_usage), llama-server's top_k and min_p, and tools
(tool_choice, parallel_tool_calls; `tool` messages and assistants' tool_calls). What it cannot do
(n > 1, logprobs, the legacy functions, echo, images) is refused with a 400 naming the field,
rather than silently ignored. Other fields (presence_penalty, user…) are ignored, as llama-server does.

Tool calls are read out of the model's text (engine/tools): an answer that called has
message.tool_calls (ids `call_...`, arguments a JSON string) and finish_reason "tool_calls"; a
stream sends each call once it is complete, as delta.tool_calls[i] (id and name, then its whole
arguments). Text the model meant as a call that is not a valid one stays in the content and is
listed in specula.tool_call_errors. tool_choice "required" or a named function is asked of the
model in its system prompt and forced by a grammar in the family's syntax (Hermes for Qwen, Hermes
and templates without tools; Llama 3.x; Mistral: engine/decoding/tool_grammar.py); under "auto" the
grammar holds a call from where it opens; an answer that
still ends without a call (a stop string cut it short) is a 422, tool_call_missing, with the model's
text in the message.

Specula's own request field is `specula` (the openai client sends it through extra_body):
`{"collections": ["notes"]}` answers a chat from those document collections; its answer then
carries `specula: {"sources": [...]}` beside `timings` and `speculation` (engine.serving.documents).
"""

from __future__ import annotations

import json
import reprlib
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from engine import ChatMessage, DoneEvent, DrafterMode, FinishReason, SamplingParams, SpecParams
from engine.serving import figures
from engine.serving.documents import Grounding
from engine.serving.generation import Generation
from engine.tools import ToolCall, ToolChoice, ToolChoiceMode, ToolSpec

MAX_STOP_STRINGS = 16
MAX_COLLECTIONS = 32  # collections one request may name
# With a seed, speculation drafts with a fixed length and confidence floor: an adaptive choice
# follows wall-clock costs, and a draft cut differently makes a differently shaped verification
# batch whose logits can round a near-tie the other way. The seed then fixes the whole text.
SEEDED_DRAFT_LENGTH = 4


class ApiError(Exception):
    """A request answered with an error, in OpenAI's shape: {"error": {message, type, param, code}}."""

    TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = self.TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Defaults:
    """The server's side of each request: its sampling when a request does not say, its caps."""

    sampling: SamplingParams
    spec: SpecParams
    max_tokens_limit: int
    has_draft: bool  # the engine has a draft model (a seeded request then drafts with it or lookup)
    model_names: tuple[str, ...]  # names a request may give for the loaded model (first: its id)


@dataclass(frozen=True)
class Parsed:
    generation: Generation
    stream: bool
    include_usage: bool


def parse_chat(body: Any, defaults: Defaults) -> Parsed:
    body = _object(body)
    _check_model(body, defaults)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects.", "messages")
    if body.get("functions") or body.get("function_call"):
        raise ApiError(400, "functions: the legacy function calling is not supported; send tools.", "functions")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type", "text") != "text":
        raise ApiError(400, "response_format: only text answers are supported.", "response_format")
    messages = _named_results(tuple(_message(m, i) for i, m in enumerate(raw)))
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise ApiError(400, "parallel_tool_calls must be true or false.", "parallel_tool_calls")
    collections = _collections(body)
    if collections and not any(m.role == "user" for m in messages):
        raise ApiError(
            400, "specula.collections grounds the last user message, and messages hold none.", "specula.collections"
        )
    generation = Generation(messages, "", *_params(body, defaults), collections, tools, tool_choice, parallel)
    return _parsed(body, defaults, generation)


def parse_completion(body: Any, defaults: Defaults) -> Parsed:
    body = _object(body)
    _check_model(body, defaults)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "prompt must be a non-empty string (one prompt per request).", "prompt")
    if body.get("echo"):
        raise ApiError(400, "echo is not supported by this server.", "echo")
    if (body.get("best_of") or 1) != 1:
        raise ApiError(400, "best_of must be 1 on this server.", "best_of")
    if _collections(body):
        raise ApiError(
            400,
            "specula.collections answers chats only (/v1/chat/completions): a raw completion has no question.",
            "specula.collections",
        )
    return _parsed(body, defaults, Generation(None, prompt, *_params(body, defaults)))


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _check_model(body: dict, defaults: Defaults) -> None:
    """A request names the loaded model (its id, or its file's name); an absent name means it too."""
    if not defaults.model_names:
        raise ApiError(503, "No model is loaded.", "model", "model_not_loaded")
    name = body.get("model")
    if name in (None, ""):
        return
    if not isinstance(name, str) or name.lower() not in {n.lower() for n in defaults.model_names}:
        raise ApiError(
            404,
            f"The model {name!r} does not exist here; this server has {defaults.model_names[0]!r} (see /v1/models).",
            "model",
            "model_not_found",
        )


def _collections(body: dict) -> tuple[str, ...]:
    """`"specula": {"collections": [names]}`: the document collections to answer from (none when absent)."""
    extra = body.get("specula")
    if extra is None:
        return ()
    if not isinstance(extra, dict):
        raise ApiError(400, 'specula must be an object, such as {"collections": ["notes"]}.', "specula")
    for name in extra:
        if name != "collections":
            raise ApiError(
                400, f"specula.{name} is not a field of this server; it knows collections.", f"specula.{name}"
            )
    names = extra.get("collections")
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ApiError(
            400,
            f"specula.collections must be a list of collection names (strings); got {reprlib.repr(names)}.",
            "specula.collections",
        )
    if len(names) > MAX_COLLECTIONS:
        raise ApiError(
            400, f"specula.collections may name at most {MAX_COLLECTIONS} collections.", "specula.collections"
        )
    return tuple(dict.fromkeys(names))


def _tools(raw: Any) -> tuple[ToolSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, "tools must be a list of function tools.", "tools")
    tools = []
    for i, tool in enumerate(raw):
        try:
            tools.append(ToolSpec.from_openai(tool))
        except ValueError as e:
            raise ApiError(400, f"tools[{i}]: {e}.", f"tools[{i}]") from None
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ApiError(400, "tools: each function must have its own name.", "tools")
    return tuple(tools)


def _tool_choice(raw: Any, tools: tuple[ToolSpec, ...]) -> ToolChoice | None:
    """OpenAI's tool_choice: "auto" (the default with tools), "none", "required" or {"type": "function", ...}."""
    if raw is None:
        return ToolChoice() if tools else None
    if isinstance(raw, str) and raw in ("auto", "none", "required"):
        choice = ToolChoice(ToolChoiceMode(raw))
    elif isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("function"), dict):
        choice = ToolChoice(ToolChoiceMode.FUNCTION, str(raw["function"].get("name") or ""))
        if choice.name not in {t.name for t in tools}:
            raise ApiError(400, f"tool_choice names {choice.name!r}, which is not one of the tools.", "tool_choice")
    else:
        raise ApiError(
            400,
            'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}.',
            "tool_choice",
        )
    if choice.must_call and not tools:
        raise ApiError(400, f"tool_choice is {raw!r}, but the request offers no tools.", "tool_choice")
    return choice


def _tool_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's tool_calls, as the API writes them (arguments a JSON string)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, f"{where}.tool_calls must be a list.", f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(raw):
        at = f"{where}.tool_calls[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(400, f"{at} must be {{id, type: function, function: {{name, arguments}}}}.", at)
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as e:
            raise ApiError(400, f"{at}.function.arguments is not JSON: {e}.", f"{at}.function.arguments") from None
        if not isinstance(parsed, dict):
            raise ApiError(400, f"{at}.function.arguments must be a JSON object.", f"{at}.function.arguments")
        call_id = call.get("id")
        calls.append(ToolCall(call_id if isinstance(call_id, str) else "", function["name"], parsed))
    return tuple(calls)


def _named_results(messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
    """Each tool result named after the call it answers, when the request did not name it."""
    names = {c.id: c.name for m in messages for c in m.tool_calls if c.id}
    return tuple(
        replace(m, name=names.get(m.tool_call_id, "")) if m.role == "tool" and not m.name else m for m in messages
    )


def _message(m: Any, i: int) -> ChatMessage:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise ApiError(400, f"{where} must be an object with role and content.", where)
    role = m.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise ApiError(
            400, f"{where}.role must be system, developer, user, assistant or tool; got {role!r}.", f"{where}.role"
        )
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}.content: only text parts are supported.", f"{where}.content")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise ApiError(400, f"{where}.content must be a string or a list of text parts.", f"{where}.content")
    reasoning = m.get("reasoning_content") if role == "assistant" else ""
    reasoning = reasoning if isinstance(reasoning, str) else ""
    if role == "assistant":
        return ChatMessage(role, content, reasoning, tool_calls=_tool_calls(m.get("tool_calls"), where))
    if role == "tool":
        call_id, name = m.get("tool_call_id") or "", m.get("name") or ""
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise ApiError(400, f"{where}.tool_call_id and name must be strings.", f"{where}.tool_call_id")
        return ChatMessage(role, content, tool_call_id=call_id, name=name)
    return ChatMessage(role, content)


def _params(body: dict, defaults: Defaults) -> tuple[SamplingParams, SpecParams]:
    if (body.get("n") or 1) != 1:
        raise ApiError(400, "n must be 1 on this server (one answer per request).", "n")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise ApiError(400, "logprobs are not supported by this server.", "logprobs")
    base = defaults.sampling
    limit = defaults.max_tokens_limit
    max_tokens = _number(body, "max_completion_tokens", 1, None, int)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, None, int)
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if max_tokens is not None and max_tokens > limit:
        raise ApiError(400, f"{name} is {max_tokens}, but this server allows at most {limit} tokens per answer.", name)
    seed = _number(body, "seed", None, None, int)
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 0.0, 2.0, float, base.temperature),
        top_p=_number(body, "top_p", 0.0, 1.0, float, base.top_p) or 1.0,  # 0 would keep nothing: "no cut"
        top_k=_number(body, "top_k", 0, None, int, base.top_k),
        min_p=_number(body, "min_p", 0.0, 1.0, float, base.min_p),
        seed=seed if seed is not None else base.seed,
        max_tokens=max_tokens or min(base.max_tokens, limit),
        stop=_stop(body.get("stop")),
    )
    # Never the user's history: how fast an answer comes would tell a client what the user wrote before.
    spec = defaults.spec.with_(history=False)
    if seed is not None and spec.mode != DrafterMode.OFF:
        spec = spec.with_(
            mode=DrafterMode.BOTH if defaults.has_draft else DrafterMode.LOOKUP,
            draft_length=spec.draft_length or SEEDED_DRAFT_LENGTH,
            draft_p_min=0.0 if spec.draft_p_min is None else spec.draft_p_min,
        )
    return sampling, spec


def _number(body: dict, name: str, lo, hi, kind, default=None):
    value = body.get(name)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not float(value).is_integer())
    ):
        raise ApiError(400, f"{name} must be {'an integer' if kind is int else 'a number'}; got {value!r}.", name)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ApiError(400, f"{name} must be {bounds}; got {value}.", name)
    return kind(value)


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings.", "stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise ApiError(400, f"stop may hold at most {MAX_STOP_STRINGS} strings.", "stop")
    return tuple(s for s in stop if s)


def _parsed(body: dict, defaults: Defaults, generation: Generation) -> Parsed:
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    return Parsed(generation, stream, include_usage)


# -- answers ---------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish_reason(done: DoneEvent) -> str:
    """OpenAI's finish_reason: a full context is "length", as with OpenAI."""
    if done.finish_reason in (FinishReason.LENGTH, FinishReason.CONTEXT):
        return "length"
    return "tool_calls" if done.finish_reason == FinishReason.TOOL_CALLS else "stop"


def missing_call(done: DoneEvent, generation: Generation) -> ApiError | None:
    """tool_choice required a call (any, or the one named) and the finished answer has none: a 422."""
    choice = generation.tool_choice
    if choice is None or not choice.must_call or done.tool_calls or done.finish_reason != FinishReason.STOP:
        return None
    what = f"a call to {choice.name}" if choice.mode == ToolChoiceMode.FUNCTION else "a tool call"
    said = done.text or "".join(m.raw for m in done.malformed_calls)
    why = "; ".join(m.reason for m in done.malformed_calls)
    return ApiError(
        422,
        f"tool_choice required {what}, but the model answered without one"
        + (f" ({why})" if why else "")
        + f": {reprlib.repr(said)}",
        "tool_choice",
        "tool_call_missing",
    )


def extras(done: DoneEvent, spec: SpecParams, queue_wait_s: float, grounding: Grounding | None = None) -> dict:
    """The fields beside OpenAI's: llama-server's `timings`, what speculation did, and for an
    answer from document collections `specula.sources`, the passages it was given."""
    fields = {
        "timings": figures.timings(done.stats, queue_wait_s),
        "speculation": figures.speculation(done.stats, spec),
    }
    specula = {}
    if grounding is not None:
        specula["sources"] = grounding.records(done.text)
    if done.malformed_calls:
        specula["tool_call_errors"] = [{"text": m.raw, "reason": m.reason} for m in done.malformed_calls]
    if specula:
        fields["specula"] = specula
    return fields


class Shaper:
    """Builds the response objects of one request (chat or completion), streamed or whole."""

    def __init__(self, chat: bool, model: str, parallel_tool_calls: bool = True):
        self.chat, self.model = chat, model
        self.parallel_tool_calls = parallel_tool_calls  # False: only an answer's first call goes out
        self.n_calls = 0  # tool calls streamed so far
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    def _envelope(self, chunk: bool, choices: list) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def first_chunk(self) -> dict | None:
        """A chat stream opens with the assistant's role, as OpenAI's does."""
        if not self.chat:
            return None
        return self._envelope(
            True, [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
        )

    def token_chunk(self, text: str, reasoning: bool) -> dict:
        if self.chat:
            delta = {"reasoning_content": text} if reasoning else {"content": text}
            return self._envelope(True, [{"index": 0, "delta": delta, "finish_reason": None}])
        return self._envelope(True, [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}])

    def tool_call_chunks(self, call: ToolCall) -> list[dict]:
        """A complete call, streamed as OpenAI does: its id and name, then its arguments (here in one piece)."""
        if self.n_calls and not self.parallel_tool_calls:
            return []
        index = self.n_calls
        self.n_calls += 1
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        args = {"index": index, "function": {"arguments": call.arguments_json}}
        return [
            self._envelope(True, [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}])
            for part in (head, args)
        ]

    def _calls(self, done: DoneEvent) -> list[dict]:
        calls = [c.as_openai() for c in done.tool_calls]
        return calls if self.parallel_tool_calls else calls[:1]

    def last_chunk(
        self, done: DoneEvent, spec: SpecParams, queue_wait_s: float, grounding: Grounding | None = None
    ) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": {}, "finish_reason": finish_reason(done)}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason(done)}
        return self._envelope(True, [choice]) | extras(done, spec, queue_wait_s, grounding)

    def usage_chunk(self, done: DoneEvent) -> dict:
        """stream_options.include_usage: one more chunk, with no choices and the usage."""
        return self._envelope(True, []) | {"usage": figures.usage(done.stats)}

    def whole(self, done: DoneEvent, spec: SpecParams, queue_wait_s: float, grounding: Grounding | None = None) -> dict:
        if self.chat:
            text = done.text + "".join(m.raw for m in done.malformed_calls)  # a botched call stays visible
            message = {"role": "assistant", "content": text or (None if done.tool_calls else "")}
            if done.tool_calls:
                message["tool_calls"] = self._calls(done)
            if done.reasoning:
                message["reasoning_content"] = done.reasoning
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(done)}
        else:
            choice = {"index": 0, "text": done.text, "logprobs": None, "finish_reason": finish_reason(done)}
        usage = {"usage": figures.usage(done.stats)}
        return self._envelope(False, [choice]) | usage | extras(done, spec, queue_wait_s, grounding)
