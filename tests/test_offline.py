"""Chatting never touches the network: with every socket connection refused, a chat still works."""

import socket

import pytest

from engine.config import ChatMessage, ModelSpec, SamplingParams
from engine.decoding.events import DoneEvent, FinishReason, TokenEvent


@pytest.fixture
def no_network(monkeypatch):
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted while chatting")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_chat_works_with_all_sockets_refused(no_network, smollm2_path, isolated_home):
    from engine.decoding.chat_engine import Engine  # imported here too: loading the engine must not need the network

    engine = Engine(ModelSpec(smollm2_path, n_ctx=2048))
    try:
        events = list(engine.chat([ChatMessage("user", "Say hello.")], SamplingParams(temperature=0, max_tokens=8)))
    finally:
        engine.close()

    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.finish_reason in (FinishReason.LENGTH, FinishReason.STOP), done.error
    assert any(isinstance(e, TokenEvent) for e in events)
    assert done.text.strip()
    assert no_network == []  # nothing even tried


# The server in a child process whose every outgoing connection is refused (and reported): it must
# start, answer over loopback and stop without trying one. Only this test process connects, to it.
REFUSING_SERVER = """
import faulthandler, signal, socket, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it hangs, if it does

def refuse(*args, **kwargs):
    print("network access attempted:", args, file=sys.stderr, flush=True)
    raise OSError("network access attempted while serving")

socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from engine.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_local_server_makes_no_outgoing_connection(smollm2_path, isolated_home):
    import re
    import signal
    import subprocess
    import sys
    import time

    import openai

    from tests.models import REPO

    command = [sys.executable, "-c", REFUSING_SERVER, "serve", "--model", smollm2_path, "--draft", "none"]
    child = subprocess.Popen(
        [*command, "--port", "0", "--ctx", "1024", "--max-tokens", "8"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()  # "serving MODEL at URL (...)" once it accepts connections
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1) ", line)
        assert found, f"no server address in {line!r}"
        client = openai.OpenAI(base_url=found.group(1), api_key="none", max_retries=0, timeout=60)
        answer = client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Say hello."}], temperature=0
        )
        assert answer.choices[0].message.content.strip()
    finally:
        child.send_signal(signal.SIGINT)
        try:
            _, stderr = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # every thread's stack to stderr: where it hangs
            time.sleep(2)
            child.kill()
            _, stderr = child.communicate()
            pytest.fail(f"the server did not stop within 30 s of Ctrl+C; its threads:\n{stderr[-8000:]}")
    assert child.returncode == 0, stderr
    assert "network access attempted" not in stderr
    assert "POST /v1/chat/completions 200" in stderr  # the request log line
