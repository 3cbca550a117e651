"""The local OpenAI-compatible server, driven by the official `openai` client over loopback.

One server (SmolLM2 as target and as its own draft, so every drafter kind can appear) is started on
an ephemeral port for the module and stopped after it; the test at the end checks nothing of it is
left running. Waits are bounded polls, never timing assertions.
"""

import http.client
import json
import threading
import time

import openai
import pytest

from engine.config import ModelSpec
from engine.serving.config import ServerConfig, is_loopback

KEY = "test-key-1234"
PAGE = "https://notebook.example"  # the one web page's origin the server allows (--cors-origin)
PROXY_NAME = "specula.test"  # a name it answers besides its own (--allow-host): a reverse proxy's
MAX_BODY = 64 * 1024
MAX_TOKENS_LIMIT = 1024
WAIT_S = 60  # bound for polls: only a hang reaches it
LONG = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"  # a base continuation that goes on and on


@pytest.fixture(scope="module")
def served(smollm2_path):
    from engine import Engine
    from engine.serving.server import serve_engine

    spec = ModelSpec(smollm2_path, n_ctx=2048)
    engine = Engine(spec, spec)
    config = ServerConfig(
        port=0,
        api_key=KEY,
        max_body_bytes=MAX_BODY,
        max_tokens_limit=MAX_TOKENS_LIMIT,
        cors_origins=(PAGE,),
        allowed_hosts=(PROXY_NAME,),
    )
    running = serve_engine(engine, config)
    yield running
    assert running.close()  # the server's and the engine's threads ended
    engine.close()
    assert not any(t.name in ("specula-server", "specula-engine") and t.is_alive() for t in threading.enumerate())


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served.url, api_key=KEY, max_retries=0, timeout=WAIT_S)


def extra(response) -> dict:
    """The fields beside OpenAI's (timings, speculation), as the client keeps them."""
    return response.model_extra or {}


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
    return value


def port_of(served) -> int:
    return int(served.url.rsplit(":", 1)[1].split("/")[0])


def raw_request(served, method: str, path: str, headers: dict, body: bytes | None = None) -> tuple[int, dict, bytes]:
    """Sent as curl sends it, with these headers only (http.client adds Content-Length for a body,
    Host only when headers have none, and Accept-Encoding): status, headers (lower case), body."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(served), timeout=WAIT_S)
    try:
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def raw_post(served, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    """A request the openai client cannot make (malformed JSON, no key): status, headers, JSON body."""
    status, got, answer = raw_request(
        served, "POST", path, {"Content-Type": "application/json", **(headers or {})}, body
    )
    return status, got, json.loads(answer or b"{}")


AUTH = {"Authorization": f"Bearer {KEY}"}


def test_it_listens_on_loopback_only_by_default(served):
    assert ServerConfig().host == "127.0.0.1" and ServerConfig().loopback_only
    assert served.url.startswith("http://127.0.0.1:")
    assert ServerConfig().exposure_warning() == ""
    warning = ServerConfig(host="0.0.0.0").exposure_warning()
    assert "every network interface" in warning and "NO API key" in warning
    assert is_loopback("localhost") and is_loopback("::1") and not is_loopback("192.168.1.5")


def test_models_lists_the_loaded_model(client, served):
    models = client.models.list().data
    assert [m.id for m in models] == [served.model_id] == ["SmolLM2-135M-Instruct.Q4_1"]
    assert client.models.retrieve(served.model_id).id == served.model_id


def test_models_say_the_context_the_model_was_loaded_with(client, served):
    """vLLM's max_model_len and llama-server's meta: what a remote client reads to size a conversation."""
    for card in (client.models.list().data[0], client.models.retrieve(served.model_id)):
        card = extra(card)
        assert card["max_model_len"] == 2048 == card["meta"]["n_ctx"]  # the fixture's n_ctx
        meta = card["meta"]
        assert meta["name"] and meta["draft"] == meta["name"]  # the model is its own draft here
        assert meta["n_ctx_train"] == 8192  # SmolLM2's trained context, from its GGUF


def test_chat_answers_whole_and_streamed_alike(client, served):
    ask = dict(
        model=served.model_id,
        messages=[{"role": "user", "content": "Name three colours."}],
        temperature=0,
        max_tokens=24,
        seed=3,  # a fixed draft length: the same rounds, so the same text, streamed or not
    )
    whole = client.chat.completions.create(**ask)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.object == "chat.completion" and whole.model == served.model_id

    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    finishes = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1 and finishes[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert "speculation" in extra(finishes[0]) and "timings" in extra(finishes[0])
    usage = chunks[-1].usage  # include_usage: a last chunk with no choices
    assert chunks[-1].choices == [] and usage.completion_tokens == whole.usage.completion_tokens


def test_completions_whole_and_streamed(client, served):
    whole = client.completions.create(
        model=served.model_id, prompt="def add(a, b):\n    return", max_tokens=8, temperature=0
    )
    assert whole.object == "text_completion" and whole.choices[0].text
    assert whole.usage.completion_tokens <= 8
    pieces = list(
        client.completions.create(
            model=served.model_id, prompt="def add(a, b):\n    return", max_tokens=8, temperature=0, stream=True, seed=1
        )
    )
    assert "".join(p.choices[0].text for p in pieces) and pieces[-1].choices[0].finish_reason in ("stop", "length")


def test_stop_strings_end_the_answer_before_them(client, served):
    answer = client.completions.create(
        model=served.model_id, prompt="1, 2, 3, 4, 5,", max_tokens=32, temperature=0, stop=[", 9"]
    )
    text = answer.choices[0].text
    assert answer.choices[0].finish_reason == "stop"
    assert "9" not in text and text.startswith(" 6, 7")  # what the model writes up to the stop string


def test_a_seed_repeats_a_sampled_answer(client, served):
    ask = dict(
        model=served.model_id,
        messages=[{"role": "user", "content": "Write a short poem about the sea."}],
        temperature=1.0,
        max_tokens=32,
        seed=1234,
    )
    a = client.chat.completions.create(**ask)
    client.chat.completions.create(**ask | {"seed": 99})  # another answer in between moves the caches
    b = client.chat.completions.create(**ask)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert extra(a)["speculation"]["drafted"] > 0  # speculation ran (fixed length), and still repeats


def test_usage_counts_and_the_kv_cache_reused_across_a_conversations_turns(client, served):
    turn1 = [{"role": "user", "content": "What is the capital of France?"}]
    first = client.chat.completions.create(model=served.model_id, messages=turn1, temperature=0, max_tokens=12)
    u = first.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens and u.completion_tokens == 12  # no stop: length
    assert first.choices[0].finish_reason == "length"
    assert extra(first)["timings"]["predicted_n"] == u.completion_tokens
    turn2 = [*turn1, {"role": "assistant", "content": first.choices[0].message.content}]
    turn2.append({"role": "user", "content": "And of Italy?"})
    second = client.chat.completions.create(model=served.model_id, messages=turn2, temperature=0, max_tokens=4)
    cached = second.usage.prompt_tokens_details.cached_tokens
    # The whole first turn (its prompt and the answer's tokens) came from the KV cache.
    assert cached >= u.prompt_tokens + u.completion_tokens - 2
    assert second.usage.prompt_tokens > cached and extra(second)["timings"]["cache_n"] == cached


def test_a_stream_ends_with_the_speculation_field_with_or_without_usage(client, served):
    """The figures come once, on the chunk with finish_reason; include_usage adds a chunk after it."""
    ask = dict(model=served.model_id, prompt="a b c d e f a b c d e f a b c d", max_tokens=16, temperature=0, seed=5)
    whole = client.completions.create(**ask)
    for options in (None, {"include_usage": True}):
        usage = {"stream_options": options} if options else {}
        chunks = list(client.completions.create(**ask, stream=True, **usage))
        finishes = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
        assert len(finishes) == 1
        last = chunks[finishes[0]]
        s, t = extra(last)["speculation"], extra(last)["timings"]
        assert s["drafted"] > 0 and s["drafted"] == t["draft_n"] and s["accepted"] == t["draft_n_accepted"]
        assert sum(s["tokens_by_source"].values()) == whole.usage.completion_tokens  # seeded: the same answer
        assert not any("speculation" in extra(c) for i, c in enumerate(chunks) if i != finishes[0])
        if options:
            assert finishes[0] == len(chunks) - 2 and chunks[-1].usage.completion_tokens == t["predicted_n"]
        else:
            assert finishes[0] == len(chunks) - 1 and all(c.usage is None for c in chunks)


def test_the_speculation_field_adds_up(client, served):
    answer = client.completions.create(
        model=served.model_id, prompt="a b c d e f a b c d e f a b c d", max_tokens=24, temperature=0, seed=5
    )
    s, t = extra(answer)["speculation"], extra(answer)["timings"]
    assert s["drafted"] > 0 and 0 <= s["accepted"] <= s["drafted"]
    assert s["acceptance"] == pytest.approx(s["accepted"] / s["drafted"], abs=1e-4)
    assert s["drafted"] == sum(d["drafted"] for d in s["drafters"].values()) == t["draft_n"]
    assert s["accepted"] == sum(d["accepted"] for d in s["drafters"].values()) == t["draft_n_accepted"]
    assert s["rounds"] == sum(d["rounds"] for d in s["drafters"].values())
    assert sum(s["tokens_by_source"].values()) == answer.usage.completion_tokens
    assert s["estimated_speedup"] > 0 and s["mean_accepted_length"] >= 0
    assert t["predicted_per_second"] > 0 and t["queue_ms"] >= 0


def test_a_wrong_or_missing_api_key_is_refused(served):
    wrong = openai.OpenAI(base_url=served.url, api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.chat.completions.create(model=served.model_id, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 401 and "API key" in refused.value.message
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    status, _, body = raw_post(served, "/v1/completions", b'{"prompt": "x"}')  # no Authorization header
    assert status == 401 and body["error"]["code"] == "invalid_api_key"


def test_malformed_json_gets_400_with_a_message(served):
    status, _, body = raw_post(served, "/v1/chat/completions", b'{"messages": [', AUTH)
    assert status == 400 and body["error"]["message"].startswith("The request body is not valid JSON")


def test_bad_fields_get_400_naming_them(client, served):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model=served.model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=10**6
        )
    assert bad.value.status_code == 400 and f"at most {MAX_TOKENS_LIMIT}" in bad.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=served.model_id, messages=[], max_tokens=4)
    assert "messages" in bad.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=served.model_id, prompt="x", temperature=7)
    assert "temperature must be between 0.0 and 2.0" in bad.value.message


def test_an_oversized_body_gets_413(client, served):
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(
            model=served.model_id, messages=[{"role": "user", "content": "x" * (MAX_BODY + 1)}], max_tokens=4
        )
    assert refused.value.status_code == 413 and f"at most {MAX_BODY:,}" in refused.value.message


def test_an_unknown_model_gets_404(client, served):
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert missing.value.status_code == 404 and served.model_id in missing.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


# -- web pages: Host, Origin and Content-Type ----------------------------------------------------
# A page the user opens may send requests to 127.0.0.1 (a form or a text/plain post needs no CORS
# preflight), and through DNS rebinding read the answers under its own name. Each request here is
# a valid one (key, JSON, fields) but for the one header a page would send.

CHAT = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}).encode()


@pytest.fixture
def queue_changes(served):
    """Every change to the engine's line during the test (a job joins, runs, leaves); empty: none ran."""
    changes: list[str] = []

    def listener():
        queue = served.service.queue
        # A job in line or running; the previous test's last job leaving (its response already sent) is not.
        if queue.running is not None or queue.n_waiting:
            changes.append("changed")

    served.service.queue.add_listener(listener)
    yield changes
    served.service.queue.remove_listener(listener)


def assert_refused_before_the_engine(served, status: int, body: bytes, code: str, queue_changes: list) -> dict:
    error = json.loads(body)["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]
    record = served.log.records()[-1]  # the refusal is in the request log, and no job ran for it
    assert record.finish == "rejected" and record.status == status and record.error == error["message"]
    assert record.t_started is None and record.n_tokens == 0 and queue_changes == []
    return error


def test_a_request_to_another_host_is_refused_before_anything_runs(served, queue_changes):
    headers = {**AUTH, "Host": f"evil.example:{port_of(served)}", "Content-Type": "application/json"}
    status, got, body = raw_request(served, "POST", "/v1/chat/completions", headers, CHAT)
    assert status == 403 and got["content-type"] == "application/json"
    error = assert_refused_before_the_engine(served, 403, body, "host_not_allowed", queue_changes)
    assert f"'evil.example:{port_of(served)}'" in error["message"] and "--allow-host NAME" in error["message"]
    assert served.log.records()[-1].path == "/v1/chat/completions"


def test_a_page_that_rebound_its_name_to_this_computer_reads_nothing(served):
    """DNS rebinding: the page's own name now resolves to 127.0.0.1, so to the browser the server is
    same-origin and the page could read what it answers; the Host still carries the page's name."""
    for host in ("attacker.test", f"attacker.test:{port_of(served)}", f"localhost.attacker.test:{port_of(served)}"):
        for path in ("/v1/models", f"/v1/models/{served.model_id}", "/health"):
            for same_origin in ({}, {"Origin": f"http://{host}"}):
                status, _, body = raw_request(served, "GET", path, {**AUTH, "Host": host, **same_origin})
                assert status == 403 and json.loads(body)["error"]["code"] == "host_not_allowed", (host, path)
                assert served.model_id.encode() not in body
    status, _, body = raw_request(served, "GET", "/v1/models", {**AUTH, "Host": ""})
    assert status == 403 and b"no Host header" in body


def test_loopback_names_on_any_port_and_an_allowed_name_are_answered(served):
    port = port_of(served)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost", "LOCALHOST:80"):
        status, _, body = raw_request(served, "GET", "/v1/models", {**AUTH, "Host": host})
        assert status == 200 and json.loads(body)["data"][0]["id"] == served.model_id, host
    # The name a reverse proxy passes on (--allow-host), on its own port: a whole answer comes back.
    for host in (PROXY_NAME, "Specula.Test:443"):
        headers = {**AUTH, "Host": host, "Content-Type": "application/json"}
        status, _, body = raw_request(served, "POST", "/v1/chat/completions", headers, CHAT)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"], host
    for host in (f"www.{PROXY_NAME}", f"{PROXY_NAME}.evil.example"):  # no wildcard was given
        assert raw_request(served, "GET", "/v1/models", {**AUTH, "Host": host})[0] == 403


def test_a_post_that_is_not_json_gets_415_before_its_body_is_read(served, queue_changes):
    for sent in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data"):
        status, _, body = raw_request(served, "POST", "/v1/chat/completions", {**AUTH, "Content-Type": sent}, CHAT)
        assert status == 415
        error = assert_refused_before_the_engine(served, 415, body, "unsupported_media_type", queue_changes)
        assert f"Content-Type {sent!r}" in error["message"] and "'Content-Type: application/json'" in error["message"]
    status, _, body = raw_request(served, "POST", "/v1/completions", AUTH, CHAT)  # none at all
    assert status == 415 and "came with no Content-Type" in json.loads(body)["error"]["message"]
    # The key first: without it, 401 whatever the body.
    assert raw_request(served, "POST", "/v1/completions", {"Content-Type": "text/plain"}, CHAT)[0] == 401

    # Before the body: it is announced too large (which would be 413) and never sent, yet the answer comes.
    import socket

    port = port_of(served)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        sock.sendall(f"{head}Content-Type: text/plain\r\nContent-Length: {MAX_BODY * 4}\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 415 ")
    assert queue_changes == []


def test_json_with_a_charset_or_in_capitals_is_accepted(served):
    for sent in ("application/json; charset=utf-8", "Application/JSON;Charset=UTF-8"):
        status, _, body = raw_request(served, "POST", "/v1/chat/completions", {**AUTH, "Content-Type": sent}, CHAT)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"], sent
        record = served.log.records()[-1]  # it ran on the engine
        assert record.t_started is not None and record.n_tokens > 0


def test_a_page_of_another_origin_is_refused_whatever_it_asks(served, queue_changes):
    port = port_of(served)
    for origin in ("https://evil.example", "null", f"http://localhost:{port + 1}", PAGE + ":8443"):
        headers = {**AUTH, "Origin": origin, "Content-Type": "application/json"}
        status, got, body = raw_request(served, "POST", "/v1/chat/completions", headers, CHAT)
        assert status == 403 and not any(name.startswith("access-control-") for name in got)
        error = assert_refused_before_the_engine(served, 403, body, "origin_not_allowed", queue_changes)
        assert origin in error["message"] and "--cors-origin" in error["message"]
        status, got, body = raw_request(served, "GET", "/v1/models", {**AUTH, "Origin": origin})
        assert status == 403 and served.model_id.encode() not in body
        preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        status, got, _ = raw_request(served, "OPTIONS", "/v1/chat/completions", preflight)
        assert status == 403 and "access-control-allow-origin" not in got


def test_the_listed_origin_and_the_servers_own_are_answered(served):
    preflight = {
        "Origin": PAGE,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    status, got, _ = raw_request(served, "OPTIONS", "/v1/chat/completions", preflight)
    assert status == 200 and got["access-control-allow-origin"] == PAGE
    headers = {**AUTH, "Origin": PAGE, "Content-Type": "application/json"}
    status, got, body = raw_request(served, "POST", "/v1/chat/completions", headers, CHAT)
    assert status == 200 and got["access-control-allow-origin"] == PAGE
    assert json.loads(body)["choices"][0]["message"]["content"]
    # Same origin: a page the server itself served (it serves none, but that one would be harmless).
    own = f"127.0.0.1:{port_of(served)}"
    status, got, body = raw_request(served, "GET", "/v1/models", {**AUTH, "Host": own, "Origin": f"http://{own}"})
    assert status == 200 and served.model_id.encode() in body and "access-control-allow-origin" not in got


def test_clients_that_are_no_web_page_are_unaffected(client, served):
    """The openai client, and an editor's plugin as it sends a request: no Origin, Host 127.0.0.1:PORT."""
    chunks = client.chat.completions.create(
        model=served.model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    headers = {**AUTH, "Host": f"127.0.0.1:{port_of(served)}", "Content-Type": "application/json"}
    body = json.dumps({"model": served.model_id, "prompt": "def f(x):", "max_tokens": 4}).encode()
    status, _, answer = raw_request(served, "POST", "/v1/completions", {**headers, "User-Agent": "editor/1.0"}, body)
    assert status == 200 and json.loads(answer)["choices"][0]["text"]


def test_the_hosts_a_server_answers(monkeypatch):
    """Without a model: which Host headers each configuration answers."""
    import socket

    loopback = ServerConfig().host_rule()
    for host in ("localhost", "localhost:8080", "127.0.0.1:1", "[::1]:8080", "LocalHost.:80"):
        assert loopback.allows(host), host
    for host in ("", "evil.example", "127.0.0.1.evil.example", "localhost.evil.example", "192.168.1.5", "0.0.0.0"):
        assert not loopback.allows(host), host

    one_address = ServerConfig(host="192.168.1.5", api_key=KEY).host_rule()
    assert one_address.allows("192.168.1.5:8080") and one_address.allows("localhost")
    assert not one_address.allows("10.0.0.1:8080") and not one_address.allows("box.local")
    assert ServerConfig(host="::1").host_rule().allows("[::1]:8080")

    monkeypatch.setattr(socket, "gethostname", lambda: "Box.example.org")
    every = ServerConfig(host="0.0.0.0", api_key=KEY).host_rule()
    for host in ("box.example.org", "box:8080", "box.local:8080", "10.1.2.3:8080", "[fe80::1]:8080", "localhost"):
        assert every.allows(host), host
    assert not every.allows("attacker.test") and not every.allows("box.attacker.test")

    added = ServerConfig(allowed_hosts=("specula.example.com", "*.lan", "[fd00::5]")).host_rule()
    for host in ("specula.example.com:443", "a.lan", "x.y.lan:8080", "[fd00::5]:8080", "localhost"):
        assert added.allows(host), host
    for host in ("lan", "evilspecula.example.com", "example.com", "evil.example"):
        assert not added.allows(host), host
    assert ServerConfig(allowed_hosts=("*",)).host_rule().allows("anything.at.all:1")


def test_allow_host_on_the_command_line(capsys):
    from engine.cli import build_parser, server_config

    serve = ["serve", "--model", "m.gguf"]
    args = build_parser().parse_args([*serve, "--allow-host", "Specula.Example.com", "--allow-host", "*.lan"])
    config = server_config(args)
    assert config.allowed_hosts == ("specula.example.com", "*.lan")
    assert config.host_rule().allows("specula.example.com") and not config.host_rule().allows("evil.example")
    assert server_config(build_parser().parse_args(serve)).allowed_hosts == ()
    for wrong in ("https://specula.example.com", "specula.example.com:443", "a*.lan", "*.*.lan", ""):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*serve, "--allow-host", wrong])
        assert "--allow-host" in capsys.readouterr().err


def test_a_client_that_disconnects_mid_stream_stops_its_generation(client, served):
    stream = client.completions.create(
        model=served.model_id, prompt=LONG, max_tokens=MAX_TOKENS_LIMIT, temperature=0, stream=True
    )
    received = [next(stream) for _ in range(5)]
    assert all(c.choices[0].text is not None for c in received)
    record = served.log.records()[-1]
    stream.close()  # the client goes away mid-answer

    # The next request is served: its answer comes, after the abandoned one ended early.
    after = client.completions.create(model=served.model_id, prompt="Hello", max_tokens=4, temperature=0)
    assert after.choices[0].text is not None
    wait_for(lambda: record.finished, "the abandoned answer to be recorded")
    assert record.finish == "cancelled" and record.client_gone
    assert record.n_tokens < MAX_TOKENS_LIMIT / 4  # stopped early, not run out to max_tokens
    second = served.log.records()[-1]
    assert second.t_started >= record.t_received and second.queue_wait_s is not None


def test_a_client_that_disconnects_while_waiting_for_a_whole_answer_stops_it(served):
    import socket

    body = json.dumps({"prompt": LONG, "max_tokens": MAX_TOKENS_LIMIT, "temperature": 0}).encode()
    port = port_of(served)
    before = len(served.log.records())
    with socket.create_connection(("127.0.0.1", port)) as sock:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        record = wait_for(lambda: served.log.records()[before:] and served.log.records()[-1], "the request to arrive")
        wait_for(lambda: record.t_started is not None, "the engine to start on it")
    # The socket is closed: the server notices (it polls) and the engine stops within a decode step.
    wait_for(lambda: record.finished, "the abandoned answer to be recorded")
    assert record.finish == "cancelled" and record.client_gone and record.n_tokens < MAX_TOKENS_LIMIT / 4


def test_requests_queue_first_come_first_served_and_a_full_queue_gets_429(client, served):
    queue = served.service.queue
    limit, queue.limit = queue.limit, 2
    results: dict[str, object] = {}
    records = {}

    def ask(name: str) -> None:
        try:
            results[name] = client.completions.create(model=served.model_id, prompt=f"{name}:", max_tokens=3)
        except Exception as e:  # noqa: BLE001 - recorded for the assertions
            results[name] = e

    try:
        running = client.completions.create(
            model=served.model_id, prompt=LONG, max_tokens=MAX_TOKENS_LIMIT, temperature=0, stream=True
        )
        next(running)  # the engine is busy with it
        threads = []
        for i, name in enumerate(("first", "second")):
            threads.append(threading.Thread(target=ask, args=(name,)))
            threads[-1].start()
            wait_for(lambda i=i: queue.n_waiting == i + 1, f"{name} to wait in the queue")
            records[name] = served.log.records()[-1]
        with pytest.raises(openai.RateLimitError) as refused:
            client.completions.create(model=served.model_id, prompt="third:", max_tokens=3)
        assert refused.value.status_code == 429 and "waiting" in refused.value.message
        assert served.log.records()[-1].status == 429
        running.close()  # its generation stops; the two waiting run, in the order they came
        for thread in threads:
            thread.join(WAIT_S)
    finally:
        queue.limit = limit
    assert not any(isinstance(results[n], Exception) for n in ("first", "second")), results
    first, second = records["first"], records["second"]
    assert first.finish in ("stop", "length") and second.finish in ("stop", "length")
    assert first.t_started <= second.t_started and second.queue_wait_s > 0


@pytest.fixture
def no_binding(monkeypatch):
    """Any attempt to bind a socket fails the test: a refused config must be refused before it."""
    import engine.serving.server as server

    def bind(host, port):
        raise AssertionError(f"bound {host}:{port}")

    monkeypatch.setattr(server, "bind", bind)


def test_beyond_loopback_a_server_needs_an_api_key(no_binding):
    from engine.serving.config import OpenServerRefused
    from engine.serving.fair_queue import FairQueue
    from engine.serving.server import LocalServer

    for host in ("0.0.0.0", "::", "", "192.168.1.5", "my-box.local"):
        for key in (None, "", "   "):
            with pytest.raises(OpenServerRefused) as refused:
                ServerConfig(host=host, api_key=key).check()
            assert "no API key" in str(refused.value)
    ServerConfig(host="0.0.0.0", api_key=KEY).check()  # with a key: allowed, and warned about
    assert "requests need the API key" in ServerConfig(host="0.0.0.0", api_key=KEY).exposure_warning()
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        ServerConfig(host=host).check()  # loopback: a key stays optional

    # Every owner of a server gets the same refusal, before the socket is bound.
    server = LocalServer(lambda: None, FairQueue(lambda job: None), ServerConfig(host="0.0.0.0", port=0), None)
    with pytest.raises(OpenServerRefused):
        server.start()
    assert not server.running


def test_serve_refuses_to_listen_beyond_loopback_without_a_key_before_loading(no_binding, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.delenv("SPECULA_API_KEY", raising=False)
    missing = "/nonexistent/model.gguf"  # never loaded: the refusal comes first
    assert main(["serve", "--model", missing, "--draft", "none", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Not starting: listening on every network interface") and "no API key" in err
    assert "SPECULA_API_KEY=KEY" in err and "--api-key KEY" in err and "Bearer KEY" in err
    assert "loading" not in err
    suggested = err.rstrip().rsplit(" ", 1)[1]
    assert len(suggested) >= 32  # a key made at random, to copy
    assert main(["serve", "--model", missing, "--draft", "none", "--host", "10.0.0.7", "--api-key", " "]) == 2
    assert "Not starting: listening on 10.0.0.7" in capsys.readouterr().err

    # With the key in the environment the check passes, and the model's load is what fails here.
    monkeypatch.setenv("SPECULA_API_KEY", KEY)
    assert main(["serve", "--model", missing, "--draft", "none", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "Not starting" not in err and "loading model.gguf" in err


def test_server_requests_never_draft_from_the_users_history():
    """How fast an answer comes would tell a client what the user wrote in the app before."""
    from engine.config import SamplingParams, SpecParams
    from engine.serving.openai_api import Defaults, _params

    defaults = Defaults(SamplingParams(), SpecParams(history=True), 4096, False, ("m",))
    assert _params({"messages": []}, defaults)[1].history is False
    assert _params({"messages": [], "seed": 3}, defaults)[1].history is False
