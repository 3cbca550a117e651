"""engine.remote against a scripted server on loopback: each test writes what the server answers.

The faults a remote engine can have (a wrong key, an unknown model, 429 with Retry-After, a stream
cut mid-answer, malformed events, a server that never answers) and the documented figure shapes of
vLLM and llama-server, streamed through the real client. The server runs in a thread for the module;
a handler that hangs is freed when the server closes. Waits are bounded; nothing asserts a duration.
"""

from __future__ import annotations

import http.server
import json
import select
import socket
import sys
import threading

import pytest

from engine.errors import user_message
from engine.remote import (
    CANCELLED,
    ApiKeyRefusedError,
    EndpointNotFoundError,
    FigureSource,
    MalformedResponseError,
    RateLimitedError,
    ReasoningDelta,
    RemoteDone,
    RemoteError,
    RemoteServer,
    RemoteUsage,
    RequestRefusedError,
    ServerFailedError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamCutError,
    TextDelta,
    UnknownModelError,
)
from engine.remote.figures import NO_SERVER_FIGURES

KEY = "sk-test-key-4f1c9a"
WAIT_S = 30  # bound for joins and polls: only a hang reaches it
MESSAGES = [{"role": "user", "content": "Hello?"}]


class ScriptedServer:
    """A loopback HTTP/1.1 server whose routes ("POST /v1/chat/completions") each test sets to a
    function of the request handler. Requests are recorded: (method, path, headers, JSON body)."""

    def __init__(self):
        self.routes: dict[str, object] = {}
        self.requests: list[tuple[str, str, dict, object]] = []
        self.clients_gone = 0  # hanging handlers that saw the client close the connection
        self.hanging = 0  # handlers in hang() now
        self._lock = threading.Lock()
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def do_GET(self):
                self._route()

            def do_POST(self):
                self._route()

            def _route(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                server.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                route = server.routes.get(f"{self.command} {self.path}")
                if route is None:
                    send_json(self, 404, {"error": {"message": f"no route {self.path}"}})
                else:
                    route(self)

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="scripted-server", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(WAIT_S)

    def hang(self, handler) -> None:
        """Answer nothing until the client goes away (counted) or the server closes."""
        conn = handler.connection
        self._count("hanging", 1)
        try:
            while not self.release.is_set():
                readable, _, _ = select.select([conn], [], [], 0.05)
                if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                    self._count("clients_gone", 1)
                    return
            handler.close_connection = True
        finally:
            self._count("hanging", -1)

    def _count(self, name: str, step: int) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + step)


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that closes its connection with data unread resets it: expected here, not printed."""

    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def send_json(handler, status: int, body: object, headers: dict | None = None) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def start_stream(handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def send_event(handler, data: object) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    piece = f"data: {text}\n\n".encode()
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
    handler.wfile.flush()


def end_stream(handler) -> None:
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


def chunk(content=None, reasoning=None, finish=None, **fields) -> dict:
    delta = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [choice],
    } | fields


def streams(*events, done=True):
    """A route that streams events (dicts or raw strings), then [DONE] if done, then ends the body."""

    def route(handler):
        start_stream(handler)
        for event in events:
            send_event(handler, event)
        if done:
            send_event(handler, "[DONE]")
        end_stream(handler)

    return route


def first_then_hang(scripted: ScriptedServer):
    """A route that streams one piece of text, then nothing more until the client goes away."""

    def route(handler):
        start_stream(handler)
        send_event(handler, chunk(content="First"))
        scripted.hang(handler)

    return route


def busy_once_then(then):
    """A route that answers 429 (Retry-After: 0) the first time and `then` from the second on;
    .calls counts the requests it got."""

    def route(handler):
        route.calls += 1
        if route.calls == 1:
            send_json(handler, 429, {"error": {"message": "queue full"}}, {"Retry-After": "0"})
        else:
            then(handler)

    route.calls = 0
    return route


def cut_after(*events):
    """A route that streams events and then drops the connection mid-body."""

    def route(handler):
        start_stream(handler)
        for event in events:
            send_event(handler, event)
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    return route


@pytest.fixture(scope="module")
def scripted_server():
    server = ScriptedServer()
    yield server
    server.close()
    assert not server.thread.is_alive()


@pytest.fixture
def scripted(scripted_server):
    wait_until(lambda: scripted_server.hanging == 0, "the last test's hanging request to end")
    scripted_server.routes.clear()
    scripted_server.requests.clear()
    scripted_server.clients_gone = 0
    return scripted_server


def remote(scripted: ScriptedServer, api_key: str | None = None, **options) -> RemoteServer:
    """A client of the scripted server; its read timeout bounds a test that would otherwise hang."""
    return RemoteServer(scripted.url, api_key, **({"read_timeout_s": WAIT_S} | options))


def answer(server: RemoteServer, model: str = "m", **options) -> tuple[list, RemoteDone]:
    events = list(server.chat(model, MESSAGES, **options))
    assert isinstance(events[-1], RemoteDone) and not any(isinstance(e, RemoteDone) for e in events[:-1])
    return events[:-1], events[-1]


def failure(server: RemoteServer, model: str = "m") -> RemoteError:
    with pytest.raises(RemoteError) as caught:
        list(server.chat(model, MESSAGES))
    return caught.value


def stopped_once_sent(server: RemoteServer, scripted: ScriptedServer) -> RemoteDone:
    """Stream on a thread, set its cancel Event once the server has the request, and return the
    one event the stream then yields."""
    cancel, out = threading.Event(), []
    thread = threading.Thread(target=lambda: out.extend(server.chat("m", MESSAGES, cancel=cancel)), daemon=True)
    thread.start()
    wait_until(lambda: scripted.requests, "the request")
    cancel.set()
    thread.join(WAIT_S)
    [done] = out
    return done


def wait_until(condition, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.02)):
        if condition():
            return
        done.wait(0.02)
    raise AssertionError(f"gave up waiting for {what}")


# -- a stream, and what the client sends -----------------------------------------------------------


def test_a_stream_yields_thinking_and_text_then_the_whole_answer(scripted):
    def route(handler):
        start_stream(handler)
        for event in (
            chunk(reasoning="Thinking."),
            chunk(content="Hel"),
            chunk(content="lo"),
            chunk(finish="stop"),
            chunk() | {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
        ):
            send_event(handler, event)
            scripted.release.wait(0.01)  # tokens apart in time, so the client has a rate to measure
        send_event(handler, "[DONE]")
        end_stream(handler)

    scripted.routes["POST /v1/chat/completions"] = route
    with remote(scripted, KEY) as server:
        deltas, done = answer(server)
    assert deltas == [ReasoningDelta("Thinking."), TextDelta("Hel"), TextDelta("lo")]
    assert (done.text, done.reasoning, done.finish_reason, done.model) == ("Hello", "Thinking.", "stop", "m")
    assert done.usage == RemoteUsage(5, 3, None) and not done.cancelled
    figures = done.figures
    assert figures.source == FigureSource.CLIENT and figures.note == NO_SERVER_FIGURES
    assert figures.n_drafted is None and figures.server_tps is None
    assert figures.client_ttft_s > 0 and figures.client_tps > 0

    [(method, path, headers, body)] = scripted.requests
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert headers["authorization"] == f"Bearer {KEY}"
    assert not [name for name in headers if name.startswith(("openai-", "x-stainless"))]
    assert body == {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_without_a_key_no_authorization_is_sent_and_the_address_gets_v1(scripted):
    scripted.routes["GET /v1/models"] = lambda h: send_json(h, 200, {"object": "list", "data": [{"id": "a"}]})
    base = scripted.url.removesuffix("/v1")
    with RemoteServer(base + "/") as server:
        assert server.base_url == scripted.url and server.where == base
        assert [m.id for m in server.models()] == ["a"]
    [(_, _, headers, _)] = scripted.requests
    assert "authorization" not in headers


def test_an_answer_cut_by_the_length_limit_is_complete_without_done(scripted):
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="One"), chunk(finish="length"), done=False)
    with remote(scripted) as server:
        _, done = answer(server)
    assert (done.text, done.finish_reason) == ("One", "length")


# -- the figures, in the shapes the servers document --------------------------------------------------

# vLLM, docs/features/speculative_decoding/acceptance_metrics.md: with --per-request-spec-decode-metrics
# summary, `metrics.speculative_decoding` rides the final usage chunk of a stream (the doc's example
# values). https://docs.vllm.ai/en/latest/features/speculative_decoding/acceptance_metrics/
VLLM_DOCUMENTED_USAGE_CHUNK = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "choices": [],
    "usage": {"prompt_tokens": 42, "completion_tokens": 53, "total_tokens": 95},
    "metrics": {
        "speculative_decoding": {
            "mean_acceptance_length": 1.2325581395348837,
            "draft_acceptance_rate": 0.07751937984496124,
            "acceptance_histogram": [39, 1, 0, 3],
            "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
            "num_spec_steps": 43,
            "num_accepted_draft_tokens": 10,
            "num_draft_tokens": 129,
            "num_spec_tokens": 3,
        }
    },
}

# llama-server, tools/server/README.md ("Timings and context usage") with the draft counts that
# result_timings::to_json (tools/server/server-task.cpp) adds when it drafted, on the final chunk.
# https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md
LLAMA_SERVER_DOCUMENTED_FINAL_CHUNK = {
    "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}],
    "created": 1757141666,
    "id": "chatcmpl-ecQULm0WqPrftUqjPZO1CFYeDjGZNbDu",
    "model": "gpt-3.5-turbo",
    "object": "chat.completion.chunk",
    "timings": {
        "cache_n": 236,
        "prompt_n": 1,
        "prompt_ms": 30.958,
        "prompt_per_token_ms": 30.958,
        "prompt_per_second": 32.301828283480845,
        "predicted_n": 35,
        "predicted_ms": 661.064,
        "predicted_per_token_ms": 18.887542857142858,
        "predicted_per_second": 52.94494935437416,
        "draft_n": 40,
        "draft_n_accepted": 30,
    },
}


def test_vllm_figures_ride_the_usage_chunk(scripted):
    scripted.routes["POST /v1/chat/completions"] = streams(
        chunk(content="Hi"), chunk(finish="stop"), VLLM_DOCUMENTED_USAGE_CHUNK
    )
    with remote(scripted) as server:
        _, done = answer(server)
    figures = done.figures
    assert figures.source == FigureSource.VLLM and figures.note == ""
    assert (figures.n_drafted, figures.n_accepted) == (129, 10)
    assert figures.acceptance_rate == pytest.approx(10 / 129)
    assert done.usage.completion_tokens == 53
    assert done.extras["metrics"] == VLLM_DOCUMENTED_USAGE_CHUNK["metrics"]


def test_llama_server_figures_ride_the_final_chunk(scripted):
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="Hi"), LLAMA_SERVER_DOCUMENTED_FINAL_CHUNK)
    with remote(scripted) as server:
        _, done = answer(server)
    figures = done.figures
    assert figures.source == FigureSource.LLAMA_SERVER
    assert (figures.n_drafted, figures.n_accepted, figures.acceptance_rate) == (40, 30, 0.75)
    assert figures.server_tps == pytest.approx(52.94494935437416)


def test_figures_a_server_puts_in_the_choice_are_read_too(scripted):
    """SGLang's meta_info sits in the choice (python/sglang/srt/entrypoints/openai/serving_chat.py)."""
    meta = {"spec_accept_rate": 0.5, "spec_accept_token_num": 6, "spec_draft_token_num": 12, "spec_verify_ct": 4}
    final = chunk(finish="stop")
    final["choices"][0]["meta_info"] = meta
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="Hi"), final)
    with remote(scripted) as server:
        _, done = answer(server)
    assert done.figures.source == FigureSource.SGLANG
    assert (done.figures.n_drafted, done.figures.n_accepted, done.figures.acceptance_rate) == (12, 6, 0.5)


# -- faults ------------------------------------------------------------------------------------------


def test_a_refused_key_says_so_and_never_shows_the_key(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(
        h, 401, {"error": {"message": f"Invalid API key {h.headers['Authorization'].split()[-1]}"}}
    )
    with remote(scripted, KEY) as server:
        error = failure(server)
        texts = [str(error), repr(error), user_message(error), repr(server), repr(server.chat("m", MESSAGES))]
    assert isinstance(error, ApiKeyRefusedError)
    assert f"{scripted.url.removesuffix('/v1')} refused the API key (HTTP 401)" in str(error)
    assert "Invalid API key •••" in str(error) and "Check the API key" in user_message(error)
    assert not [text for text in texts if KEY in text]


def test_a_server_that_needs_a_key_says_so_when_none_was_given(scripted):
    scripted.routes["GET /v1/models"] = lambda h: send_json(h, 403, {"detail": "Not authenticated"})
    with remote(scripted) as server, pytest.raises(ApiKeyRefusedError) as caught:
        server.models()
    assert "requires an API key (HTTP 403): Not authenticated" in str(caught.value)


def test_an_unknown_model_is_named_with_the_ones_the_server_has(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(
        h, 404, {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError"}}
    )
    scripted.routes["GET /v1/models"] = lambda h: send_json(h, 200, {"data": [{"id": "alpha"}, {"id": "beta"}]})
    with remote(scripted) as server:
        error = failure(server, model="nope")
    assert isinstance(error, UnknownModelError)
    assert (error.model, error.available) == ("nope", ("alpha", "beta"))
    assert "has no model 'nope'; it has alpha, beta." in user_message(error)


def test_a_url_without_the_api_says_where_the_api_usually_is(scripted):
    with remote(scripted) as server:  # no routes: every path is 404
        error = failure(server)
    assert isinstance(error, EndpointNotFoundError)
    assert "has no OpenAI-compatible API at" in str(error) and "/v1" in error.hint


def test_429_waits_for_retry_after_then_answers(scripted):
    scripted.routes["POST /v1/chat/completions"] = busy_once_then(streams(chunk(content="Done"), chunk(finish="stop")))
    with remote(scripted) as server:
        _, done = answer(server)
    assert done.text == "Done" and len(scripted.requests) == 2


@pytest.mark.parametrize(
    ("retry_after", "options", "n_requests", "said"),
    [
        ("0", {"max_retries": 2}, 3, "was still busy after 2 retries (HTTP 429): queue full"),
        ("3600", {"max_retry_wait_s": 60}, 1, "is busy and asks to wait 3600 s before another request (HTTP 429)"),
    ],
)
def test_429_gives_up_after_the_retries_or_at_once_when_asked_to_wait_too_long(
    scripted, retry_after, options, n_requests, said
):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(
        h, 429, {"error": {"message": "queue full"}}, {"Retry-After": retry_after}
    )
    with remote(scripted, **options) as server:
        error = failure(server)
    assert isinstance(error, RateLimitedError) and len(scripted.requests) == n_requests
    assert said in str(error)


def test_stop_during_a_retry_after_wait_ends_the_answer_as_cancelled(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(h, 429, {}, {"Retry-After": "50"})
    with remote(scripted, max_retry_wait_s=60) as server:
        done = stopped_once_sent(server, scripted)
    assert done.cancelled and done.text == "" and len(scripted.requests) == 1


def test_a_server_failure_carries_its_message(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(h, 500, {"error": {"message": "CUDA OOM"}})
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, ServerFailedError) and "failed to answer (HTTP 500): CUDA OOM" in str(error)


def test_a_refused_request_carries_the_servers_reason(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(
        h, 400, {"error": {"message": "This model's maximum context length is 2048 tokens."}}
    )
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, RequestRefusedError) and "maximum context length is 2048" in str(error)


def test_a_stream_cut_mid_answer_keeps_the_text_so_far(scripted):
    scripted.routes["POST /v1/chat/completions"] = cut_after(chunk(reasoning="Hm."), chunk(content="The an"))
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, StreamCutError)
    assert (error.partial_text, error.partial_reasoning) == ("The an", "Hm.")
    assert "was cut off" in str(error) and "kept, marked as cut off" in user_message(error)


def test_a_stream_that_ends_before_the_answer_did_is_cut_too(scripted):
    # a clean end of the body, but no finish_reason and no [DONE]
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="Half"), done=False)
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, StreamCutError) and error.partial_text == "Half"
    assert "ended without a finish reason" in str(error)


@pytest.mark.parametrize(
    ("event", "said"),
    [
        ("{not json", "an event that is not JSON"),
        ('{"id": "x"}', "an event without choices"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_malformed_event_is_named_and_keeps_the_text_so_far(scripted, event, said):
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="Before"), event)
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, MalformedResponseError) and said in str(error) and error.partial_text == "Before"


def test_an_error_event_mid_stream_keeps_the_text_so_far(scripted):
    error_event = {"error": {"message": "llama_decode failed", "type": "server_error"}}
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="So far"), error_event)
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, ServerFailedError) and error.partial_text == "So far"
    assert "stopped the answer with an error: llama_decode failed" in str(error)


def test_an_answer_that_is_not_a_stream_is_malformed(scripted):
    scripted.routes["POST /v1/chat/completions"] = lambda h: send_json(h, 200, {"choices": []})
    with remote(scripted) as server:
        error = failure(server)
    assert isinstance(error, MalformedResponseError) and "sent application/json, not an event stream." in str(error)


def test_a_server_that_never_answers_times_out(scripted):
    scripted.routes["POST /v1/chat/completions"] = scripted.hang
    with remote(scripted, read_timeout_s=0.3) as server:
        error = failure(server)
    assert isinstance(error, ServerTimeoutError) and "sent nothing back for 0.3 s" in str(error)


def test_stop_before_the_first_byte_closes_the_connection(scripted):
    """A server that holds its headers (llama-server does, until its first token) still sees Stop."""
    scripted.routes["POST /v1/chat/completions"] = scripted.hang
    with remote(scripted, read_timeout_s=600) as server:
        done = stopped_once_sent(server, scripted)
    assert done.cancelled and done.finish_reason == CANCELLED
    wait_until(lambda: scripted.clients_gone == 1, "the server to see the client go")


def test_a_server_silent_mid_answer_times_out_keeping_the_text(scripted):
    scripted.routes["POST /v1/chat/completions"] = first_then_hang(scripted)
    with remote(scripted, read_timeout_s=0.3) as server:
        error = failure(server)
    assert isinstance(error, ServerTimeoutError) and error.partial_text == "First"
    assert "went silent in the middle of the answer for 0.3 s" in str(error)


def test_close_mid_stream_keeps_the_text_and_closes_the_connection(scripted):
    scripted.routes["POST /v1/chat/completions"] = first_then_hang(scripted)
    with remote(scripted, read_timeout_s=600) as server:
        stream = server.chat("m", MESSAGES)
        events = iter(stream)
        assert next(events) == TextDelta("First")
        threading.Timer(0.05, stream.close).start()  # Stop from another thread while the read blocks
        rest = list(events)
    [done] = rest
    assert done.cancelled and done.text == "First"
    assert "Stopped before the server sent its figures" in done.figures.note
    wait_until(lambda: scripted.clients_gone == 1, "the server to see the client go")


def test_a_port_with_nothing_listening_is_unreachable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again at once: nothing listens there
    with RemoteServer(f"http://127.0.0.1:{port}/v1") as server:
        error = failure(server)
    assert isinstance(error, ServerUnreachableError)
    assert user_message(error).startswith(f"Could not reach http://127.0.0.1:{port}: connection refused")


def test_an_address_that_is_not_a_url_is_refused_before_any_request():
    with pytest.raises(RemoteError) as caught:
        RemoteServer("192.168.1.20:8080")
    assert "is not a server address" in user_message(caught.value)
