"""The local server answering from a document collection: `"specula": {"collections": [...]}`.

A real server on loopback (SmolLM2, as in test_server) over a real library: a collection of licence
texts every Debian system carries, indexed in a temporary folder the server's config names. The
official `openai` client sends the field through extra_body and reads the sources back from the
answer, whole and streamed. Waits are bounded polls, never timing assertions.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import openai
import pytest

from engine.config import ChatMessage, ModelSpec
from engine.documents import grounding, indexer
from engine.documents.library import Library, LibraryError
from engine.serving.config import ServerConfig

LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files: real, long, structured documents
KEY = "test-key-5678"
N_CTX = 2048
WAIT_S = 60  # bound for polls: only a hang reaches it
QUESTION = "What goes in the NOTICE text file of a Derivative Work?"
AUTH = {"Authorization": f"Bearer {KEY}"}
GROUNDED = {"specula": {"collections": ["licenses"]}}
SOURCE_FIELDS = {"n", "collection", "path", "page", "line_start", "line_end", "heading", "text", "cited"}


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory) -> Path:
    """A library with the collection "licenses": Apache-2.0, GPL-3 and MPL-2.0, indexed."""
    root = tmp_path_factory.mktemp("server-documents")
    folder = root / "licenses"
    folder.mkdir()
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0"):
        assert (LICENSES / name).is_file(), f"{LICENSES / name} is part of Debian's base-files"
        shutil.copy(LICENSES / name, folder / name)
    library = Library(root / "library")
    try:
        library.add_collection("licenses")
        library.add_sources("licenses", [folder])
        assert indexer.update(library, "licenses").read == 3
    finally:
        library.close()
    return root / "library"


@pytest.fixture(scope="module")
def served(smollm2_path, library_dir):
    from engine import Engine
    from engine.serving.server import serve_engine

    engine = Engine(ModelSpec(smollm2_path, n_ctx=N_CTX))
    running = serve_engine(engine, ServerConfig(port=0, api_key=KEY, documents_dir=str(library_dir)))
    yield running
    assert running.close()
    engine.close()
    assert not any(t.name in ("specula-server", "specula-engine") and t.is_alive() for t in threading.enumerate())


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served.url, api_key=KEY, max_retries=0, timeout=WAIT_S)


def ask(served, question: str = QUESTION) -> dict:
    return dict(
        model=served.model_id,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=16,
        seed=3,  # a fixed draft length: the same text streamed or whole
    )


def extra(response) -> dict:
    """The fields beside OpenAI's (timings, speculation, specula), as the client keeps them."""
    return response.model_extra or {}


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
    return value


def raw_post(served, body: dict, headers: dict) -> tuple[int, dict]:
    """The request as curl sends it: status and the JSON answer."""
    import http.client

    port = int(served.url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def assert_citations_read_back(sources: list[dict], answer: str) -> None:
    cited = grounding.cited(answer, len(sources))
    assert [s["n"] for s in sources if s["cited"]] == sorted(cited)


def test_the_openai_client_gets_the_sources_of_an_answer_from_a_collection(client, served):
    plain = client.chat.completions.create(**ask(served))
    answer = client.chat.completions.create(**ask(served), extra_body=GROUNDED)
    assert answer.choices[0].message.content and answer.choices[0].finish_reason in ("stop", "length")
    sources = extra(answer)["specula"]["sources"]
    assert sources and all(set(s) == SOURCE_FIELDS for s in sources)
    first = sources[0]
    assert first["path"].endswith("Apache-2.0") and '"NOTICE" text file' in first["text"]
    assert first["collection"] == "licenses" and first["page"] is None
    # Exactly where it is: its first and last lines in the file.
    lines = Path(first["path"]).read_text().splitlines()
    assert lines[first["line_start"] - 1].strip() == first["text"].split("\n", 1)[0].strip()
    assert first["text"].rstrip().endswith(lines[first["line_end"] - 1].strip())
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    assert_citations_read_back(sources, answer.choices[0].message.content)
    # The passages were in the prompt; the speculation figures are still there beside them.
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + 200
    assert "speculation" in extra(answer) and "timings" in extra(answer)

    record = served.log.records()[-1]  # the request log says how many passages went in
    assert record.n_passages == len(sources)
    assert f"{len(sources)} passage{'' if len(sources) == 1 else 's'} from documents" in record.line()


def test_a_streamed_answer_carries_the_sources_in_its_last_chunk(client, served):
    whole = client.chat.completions.create(**ask(served), extra_body=GROUNDED)
    chunks = list(
        client.chat.completions.create(
            **ask(served), stream=True, stream_options={"include_usage": True}, extra_body=GROUNDED
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [i for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1 and finishes[0] == len(chunks) - 2  # the usage chunk follows it
    last = extra(chunks[finishes[0]])
    assert last["specula"]["sources"] == extra(whole)["specula"]["sources"]
    assert "speculation" in last and "timings" in last
    assert not any("specula" in extra(c) for i, c in enumerate(chunks) if i != finishes[0])
    assert_citations_read_back(last["specula"]["sources"], text)


# A conversation that leaves room for some of the passages found, not all.
EARLIER = [
    {"role": "user", "content": "Keep this list: " + ", ".join(f"item {i}" for i in range(200))},
    {"role": "assistant", "content": "Kept."},
    {"role": "user", "content": QUESTION},
]


def test_a_long_conversation_gets_the_passages_that_still_fit(client, served):
    short = client.chat.completions.create(**ask(served) | {"max_tokens": 4}, extra_body=GROUNDED)
    long = client.chat.completions.create(
        **ask(served) | {"max_tokens": 4} | {"messages": EARLIER}, extra_body=GROUNDED
    )
    found = [(s["path"], s["line_start"]) for s in extra(short)["specula"]["sources"]]
    fitting = [(s["path"], s["line_start"]) for s in extra(long)["specula"]["sources"]]
    assert 0 < len(fitting) < len(found)  # fewer, and still some
    assert fitting == [f for f in found if f in fitting]  # in the order found, best first
    # What went in fits with the answer's room: the conversation was not cut to make room.
    assert long.usage.prompt_tokens + 4 <= N_CTX and long.choices[0].finish_reason in ("stop", "length")
    assert long.usage.prompt_tokens > 800  # the earlier turns are all there


def test_the_tools_offered_take_their_room_from_the_passages(client, served):
    """The template writes the tools' descriptions into the prompt: the passages that fit are fewer, and the
    prompt still leaves the answer its room."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"lookup_{i}",
                "description": f"Look up record {i} of the archive by its key. " * 4,
                "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
            },
        }
        for i in range(4)
    ]
    request = ask(served) | {"max_tokens": 4, "messages": EARLIER}
    without = client.chat.completions.create(**request, extra_body=GROUNDED)
    offered = client.chat.completions.create(**request, tools=tools, extra_body=GROUNDED)
    assert offered.usage.prompt_tokens + 4 <= N_CTX and offered.choices[0].finish_reason in ("stop", "length")
    assert len(extra(offered)["specula"]["sources"]) < len(extra(without)["specula"]["sources"])
    assert offered.usage.prompt_tokens > 800  # the earlier turns are all there


def test_an_unknown_collection_gets_400_naming_it_before_anything_runs(client, served):
    runs = served.log.records()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ask(served), extra_body={"specula": {"collections": ["licenses", "nosuch"]}})
    error = refused.value.body
    assert refused.value.status_code == 400 and "'nosuch'" in refused.value.message
    assert "'licenses'" in refused.value.message  # what there is
    assert error["param"] == "specula.collections" and error["code"] == "collection_not_found"
    record = served.log.records()[-1]
    assert record not in runs and record.finish == "rejected" and record.t_started is None


@pytest.mark.parametrize(
    ("field", "param"),
    [
        ("licenses", "specula"),
        ({"collections": "licenses"}, "specula.collections"),
        ({"collections": [1]}, "specula.collections"),
        ({"collections": [""]}, "specula.collections"),
        ({"collections": ["licenses"] * 33}, "specula.collections"),
        ({"collection": ["licenses"]}, "specula.collection"),  # a typo is not ignored
    ],
)
def test_a_malformed_field_gets_400_naming_it(client, served, field, param):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ask(served), extra_body={"specula": field})
    assert refused.value.status_code == 400 and refused.value.body["param"] == param
    assert param in refused.value.message


def test_collections_need_a_chat_with_a_question(client, served):
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=served.model_id, prompt="Apache", max_tokens=4, extra_body=GROUNDED)
    assert "chats only" in refused.value.message and refused.value.body["param"] == "specula.collections"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            **ask(served) | {"messages": [{"role": "system", "content": QUESTION}]}, extra_body=GROUNDED
        )
    assert "last user message" in refused.value.message


def test_without_the_field_nothing_changes(client, served):
    for body in ({}, {"extra_body": {"specula": {"collections": []}}}):
        whole = client.chat.completions.create(**ask(served), **body)
        assert "specula" not in extra(whole) and "speculation" in extra(whole)
        record = served.log.records()[-1]
        assert record.n_passages is None and "passage" not in record.line()
        assert whole.usage.prompt_tokens < 100  # the question alone (one passage is some 200 tokens)
        chunks = list(client.chat.completions.create(**ask(served), stream=True, **body))
        assert (
            "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
        )
        assert not any("specula" in extra(c) for c in chunks)


def test_curl_gets_the_sources_and_web_pages_are_still_refused(served):
    body = ask(served) | GROUNDED
    status, answer = raw_post(served, body, {**AUTH, "Content-Type": "application/json"})
    assert status == 200 and answer["specula"]["sources"][0]["path"].endswith("Apache-2.0")

    before = len(served.log.records())
    refusals = [
        ({"Origin": "https://evil.example", "Content-Type": "application/json"}, 403, "origin_not_allowed"),
        ({"Host": "attacker.test", "Content-Type": "application/json"}, 403, "host_not_allowed"),
        ({"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    ]
    for headers, expected, code in refusals:
        status, answer = raw_post(served, body, {**AUTH, **headers})
        assert status == expected and answer["error"]["code"] == code and "specula" not in answer
    # Each refusal is in the request log, and nothing else came: no request reached the engine's line.
    refused = served.log.records()[before:]
    assert [r.status for r in refused] == [403, 403, 415]
    assert all(r.finish == "rejected" and r.t_started is None and r.n_passages is None for r in refused)


def test_a_collection_removed_while_the_request_waits_gets_400(client, served, library_dir):
    library = Library(library_dir)
    try:
        library.add_collection("brief")
        library.add_sources("brief", [LICENSES / "MPL-2.0"])
        indexer.update(library, "brief")
    finally:
        library.close()
    queue = served.service.queue
    running = client.completions.create(
        model=served.model_id, prompt="1, 2, 3, 4, 5,", max_tokens=1024, temperature=0, stream=True
    )
    results: dict[str, object] = {}

    def grounded() -> None:
        try:
            results["answer"] = client.chat.completions.create(
                **ask(served), extra_body={"specula": {"collections": ["brief"]}}
            )
        except Exception as e:  # noqa: BLE001 - asserted below
            results["answer"] = e

    try:
        next(running)  # the engine is busy with it
        waiting = threading.Thread(target=grounded)
        waiting.start()
        wait_for(lambda: queue.n_waiting == 1, "the grounded request to wait")  # its names were checked
        library = Library(library_dir)
        try:
            library.remove_collection("brief")
        finally:
            library.close()
    finally:
        running.close()
    waiting.join(WAIT_S)
    refused = results["answer"]
    assert isinstance(refused, openai.BadRequestError) and "no collection named 'brief'" in refused.message


def test_the_library_is_the_data_folders_unless_the_config_names_another(tmp_path, monkeypatch):
    from engine import paths
    from engine.serving.documents import Documents
    from engine.serving.fair_queue import FairQueue
    from engine.serving.server import LocalServer

    home = tmp_path / "home"
    monkeypatch.setenv("SPECULA_HOME", str(home))
    assert ServerConfig().documents_dir == ""
    server = LocalServer(lambda: None, FairQueue(lambda job: None), ServerConfig(port=0), None)
    assert not home.exists()  # a server never asked for a collection creates no folder
    library = Library(paths.documents_dir())
    try:
        library.add_collection("notes")
    finally:
        library.close()
    assert server.service.documents.root == paths.documents_dir()
    assert server.service.documents.unknown(("notes", "other")) == (["other"], ["notes"])
    assert Documents(tmp_path / "elsewhere").unknown(("notes",)) == (["notes"], [])
    with pytest.raises(LibraryError, match="'other'"):  # checked again where it runs, before the model is used
        server.service.documents.ground(None, [ChatMessage("user", "hi")], ("other",), 16)
    server.service.documents.close()


def test_with_an_embedding_model_chosen_the_server_finds_passages_by_meaning(smollm2_path, qwen_paths, tmp_path):
    """The library's embedding model (chosen in the app or with `engine docs embedder`) makes the
    server's search hybrid, as the app's: a question that shares no word with its answer finds it.
    A reranking model chosen (`engine docs reranker`) then puts it first."""
    from engine import Engine
    from engine.documents import vectors
    from engine.documents.embeddings import Embedder
    from engine.serving.documents import Documents
    from engine.serving.server import serve_engine
    from tests import embedding_fixture

    folder, root = tmp_path / "licenses", tmp_path / "library"  # its own library: the module's is in use
    folder.mkdir()
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0"):
        shutil.copy(LICENSES / name, folder / name)
    library = Library(root)
    library.add_collection("licenses")
    library.add_sources("licenses", [folder])
    assert indexer.update(library, "licenses").read == 3
    library.close()
    question = "Why does the licence worry about gadgets that refuse to run altered firmware?"
    answer_starts = "Some devices are designed to deny users access"
    engine = Engine(ModelSpec(smollm2_path, n_ctx=N_CTX))
    try:
        by_keywords = Documents(root)
        _, found = by_keywords.ground(engine, [ChatMessage("user", question)], ("licenses",), 16)
        by_keywords.close()
        assert found.sources and not any(
            answer_starts in " ".join(h.text.split()) for h in found.sources
        )  # no shared word

        library = Library(root)
        minilm = embedding_fixture.minilm_gguf()
        library.set_embedding_model(str(minilm))
        with Embedder(minilm) as embedder:
            vectors.update(library, "licenses", embedder)
        library.close()
        running = serve_engine(engine, ServerConfig(port=0, api_key=KEY, documents_dir=str(root)))
        try:
            client = openai.OpenAI(base_url=running.url, api_key=KEY, max_retries=0, timeout=WAIT_S)
            answer = client.chat.completions.create(**{**ask(running, question), "max_tokens": 8}, extra_body=GROUNDED)
            sources = extra(answer)["specula"]["sources"]
            assert any(answer_starts in " ".join(s["text"].split()) for s in sources)
        finally:
            assert running.close()

        hybrid = Documents(root)
        _, found = hybrid.ground(engine, [ChatMessage("user", question)], ("licenses",), 16)
        hybrid.close()
        # Found by meaning among the first two (the first by keywords holds more of the question's words).
        assert any(answer_starts in " ".join(hit.text.split()) for hit in found.sources[:2])
        assert any(answer_starts in text for text in found.drafts[:2])  # drafted from, reflowed as the prompt has it

        library = Library(root)
        library.set_reranking_model(qwen_paths[1])  # the starter draft, as engine.bench_docs measured it
        library.close()
        reranked = Documents(root)
        _, found = reranked.ground(engine, [ChatMessage("user", question)], ("licenses",), 16)
        assert reranked._chosen()[1].model is not None  # loaded on this thread, kept for the next request
        reranked.close()
        assert answer_starts in " ".join(found.sources[0].text.split())
    finally:
        engine.close()
