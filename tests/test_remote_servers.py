"""engine.remote against real servers on loopback, run here as subprocesses: Specula's own
(`python -m engine serve`) and llama-cpp-python's OpenAI server (`python -m llama_cpp.server`,
started through tests/llama_cpp_server.py so that it runs on AMX Xeons too), an implementation we
did not write. SmolLM2 serves both. Each server lives for the module and is
stopped (terminate, then kill) however the tests end; waits are bounded, nothing asserts a duration.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from engine.config import SamplingParams
from engine.errors import user_message
from engine.gguf.header import read_header
from engine.llama import cpu_weights
from engine.remote import (
    ApiKeyRefusedError,
    FigureSource,
    RemoteDone,
    RemoteModel,
    RemoteServer,
    TextDelta,
    UnknownModelError,
)
from engine.remote.figures import NO_SERVER_FIGURES
from tests import models

KEY = "specula-remote-test-key-7d2e"
SPECULA_MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the id Specula lists: the file's name without .gguf
START_S = 180  # bound for a server to load its model and listen
WAIT_S = 60  # bound for anything else: only a hang reaches it
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
LONG = SamplingParams(temperature=0.0, max_tokens=400)
ASK = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]


class ServerProcess:
    """A server subprocess; its stdout and stderr lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        self.proc = subprocess.Popen(
            args, cwd=models.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._readers = [
            threading.Thread(target=self._read, args=(pipe,), daemon=True)
            for pipe in (self.proc.stdout, self.proc.stderr)
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                self._new_line.notify_all()
        with self._new_line:  # the process ended: a waiter need not wait out its timeout
            self._new_line.notify_all()

    def wait_for_line(self, pattern: str, what: str, timeout_s: float) -> re.Match:
        """The first output line matching pattern; fails if the process ends or timeout_s passes."""
        with self._new_line:
            self._new_line.wait_for(lambda: self._match(pattern) or self.proc.poll() is not None, timeout_s)
            found = self._match(pattern)
        assert found, f"gave up waiting for {what}; the server said:\n" + "\n".join(self.lines[-20:])
        return found

    def _match(self, pattern: str) -> re.Match | None:
        return next((m for line in self.lines if (m := re.search(pattern, line))), None)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT_S)
        for reader in self._readers:
            reader.join(WAIT_S)


@pytest.fixture(scope="module")
def specula(smollm2_path, tmp_path_factory):
    """`python -m engine serve` with SmolLM2 as its own draft (so, greedy, every draft is accepted),
    on a free port, with an API key and a data folder of its own."""
    env = os.environ | {"SPECULA_HOME": str(tmp_path_factory.mktemp("specula-home"))}
    args = [sys.executable, "-m", "engine", "serve", "--model", smollm2_path, "--draft", smollm2_path]
    args += ["--mode", "draft", "--draft-length", "3", "--ctx", "1024", "--threads", "1", "--port", "0"]
    server = ServerProcess([*args, "--api-key", KEY], env)
    try:
        url = server.wait_for_line(r"serving \S+ at (http://\S+)", "Specula to listen", START_S).group(1)
        yield server, url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llama_cpp_server(smollm2_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Two threads for prompts (its default: the CPU count), the width and thread count that crashed
    # llama.cpp's AMX kernels: the launcher must keep the model out of the AMX buffer.
    args = [sys.executable, "-m", "tests.llama_cpp_server", "--model", smollm2_path, "--host", "127.0.0.1"]
    args += ["--port", str(port), "--n_ctx", "512", "--n_threads", "1", "--n_threads_batch", "2"]
    server = ServerProcess(args)
    try:
        server.wait_for_line(r"Uvicorn running on", "llama-cpp-python's server to listen", START_S)
        placement = server.wait_for_line(r"specula placement: (.*)", "the launcher's placement", WAIT_S).group(1)
        assert placement == weight_placement(smollm2_path).summary
        # llama.cpp's own load log names each weight buffer: never AMX, whatever this CPU offers.
        buffers = [line for line in server.lines if "model buffer size" in line]
        assert buffers and not any("AMX" in line for line in buffers), buffers
        yield server, f"http://127.0.0.1:{port}/v1"
    finally:
        server.stop()


def weight_placement(path: str) -> cpu_weights.WeightPlacement:
    header = read_header(path)
    return cpu_weights.plan(header.tensors, header.n_layers or 0, 0, allow_amx=False)


def answer(server: RemoteServer, model: str, sampling: SamplingParams = GREEDY) -> tuple[str, RemoteDone]:
    events = list(server.chat(model, ASK, sampling))
    *deltas, done = events
    assert isinstance(done, RemoteDone) and not done.cancelled
    return "".join(d.text for d in deltas if isinstance(d, TextDelta)), done


# -- Specula's own server ---------------------------------------------------------------------------


def test_specula_lists_its_model_with_the_context_it_serves(specula):
    _, url = specula
    with RemoteServer(url, KEY, read_timeout_s=WAIT_S) as server:
        assert server.models() == [RemoteModel(SPECULA_MODEL, 1024, "specula")]


def test_specula_streams_an_answer_with_its_speculation_figures(specula):
    _, url = specula
    with RemoteServer(url, KEY, read_timeout_s=WAIT_S) as server:
        streamed, done = answer(server, SPECULA_MODEL)
    assert streamed and done.text == streamed and done.finish_reason in ("stop", "length")
    figures = done.figures
    assert figures.source == FigureSource.SPECULA and figures.note == ""
    assert figures.n_drafted > 0 and figures.n_accepted == figures.n_drafted  # its own draft, greedy
    assert figures.acceptance_rate == 1.0 and figures.server_tps > 0
    assert figures.client_ttft_s > 0 and done.usage.completion_tokens > 0
    assert figures.raw["speculation"]["mode"] == "draft"


def test_specula_refuses_a_wrong_key_without_showing_it(specula):
    _, url = specula
    with RemoteServer(url, "not-the-key", read_timeout_s=WAIT_S) as server, pytest.raises(ApiKeyRefusedError) as caught:
        list(server.chat(SPECULA_MODEL, ASK, GREEDY))
    message = user_message(caught.value)
    assert message.startswith(f"{server.where} refused the API key (HTTP 401)")
    assert "not-the-key" not in message and KEY not in message


def test_specula_names_its_model_when_asked_for_another(specula):
    _, url = specula
    with RemoteServer(url, KEY, read_timeout_s=WAIT_S) as server, pytest.raises(UnknownModelError) as caught:
        list(server.chat("no-such-model", ASK, GREEDY))
    assert caught.value.available == (SPECULA_MODEL,)
    assert f"has no model 'no-such-model'; it has {SPECULA_MODEL}." in str(caught.value)


def test_stop_mid_answer_ends_the_stream_and_the_servers_generation(specula):
    process, url = specula
    cancel = threading.Event()
    streamed = []
    with RemoteServer(url, KEY, read_timeout_s=WAIT_S) as server:
        for event in server.chat(SPECULA_MODEL, ASK, LONG, cancel=cancel):
            if isinstance(event, TextDelta):
                streamed.append(event.text)
                if len(streamed) == 3:
                    cancel.set()  # Stop, as the window's button would
            elif isinstance(event, RemoteDone):
                done = event
    assert done.cancelled and done.text == "".join(streamed)
    assert done.usage is None or done.usage.completion_tokens < LONG.max_tokens
    # the server's request log: the engine stopped this request because its client went away
    process.wait_for_line(r"POST /v1/chat/completions 200 .* cancelled \(client gone\)", "the request log", WAIT_S)


# -- llama-cpp-python's server: an implementation we did not write -----------------------------------


def test_llama_cpp_python_lists_its_model(llama_cpp_server, smollm2_path):
    _, url = llama_cpp_server
    with RemoteServer(url, read_timeout_s=WAIT_S) as server:
        [model] = server.models()
    assert model.id == smollm2_path and model.context_size is None  # it reports no context size


def test_llama_cpp_python_streams_with_client_figures_only(llama_cpp_server, smollm2_path):
    _, url = llama_cpp_server
    with RemoteServer(url, read_timeout_s=WAIT_S) as server:
        streamed, done = answer(server, smollm2_path)
    assert streamed and done.text == streamed and done.finish_reason in ("stop", "length")
    figures = done.figures
    assert figures.source == FigureSource.CLIENT and figures.note == NO_SERVER_FIGURES
    assert figures.n_drafted is None and figures.client_ttft_s > 0
