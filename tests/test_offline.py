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
