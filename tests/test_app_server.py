"""The app's Local server: the switch serves the app's own Engine, the log shows each request, and
the app's chat waits its turn behind a client's request (and says so in the status bar)."""
# ruff: noqa: F811  (pytest fixtures imported from other test modules)

import http.client
import threading

import openai

from app.dialogs.server_panel import ServerPanel, ServerStatusLabel
from tests.app_helpers import ANSWER_TIMEOUT_MS, ask, make_window, smol_settings, wait_answer  # noqa: F401


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "specula-server" and t.is_alive()]


def server_status(window) -> ServerStatusLabel:
    return window.status.findChild(ServerStatusLabel)


def client_for(window) -> openai.OpenAI:
    return openai.OpenAI(base_url=window.server.url, api_key="none", max_retries=0, timeout=120)


def raw_status(window, method: str, path: str, headers: dict, body: bytes | None = None) -> int:
    port = int(window.server.url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body, headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_switch_serves_the_loaded_model_and_logs_each_request(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path))
    window.open_server_panel()
    panel: ServerPanel = window.server_panel
    panel.port.setValue(0)  # any free port: tests run side by side
    panel.switch.setChecked(True)

    assert window.server.running and window.server.url.startswith("http://127.0.0.1:")
    status = server_status(window)
    assert status.isVisible() and window.server.url in status.text()
    assert window.server.url in panel.where.text() and not panel.port.isEnabled()

    client = client_for(window)
    assert [m.id for m in client.models.list().data] == ["SmolLM2-135M-Instruct.Q4_1"]
    answer = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert answer.choices[0].message.content and answer.usage.completion_tokens <= 8
    qtbot.waitUntil(lambda: "POST /v1/chat/completions 200" in panel.log_view.toPlainText(), timeout=10_000)
    # With no key, a web page is what could reach it: a rebound name and a text/plain post are refused.
    assert raw_status(window, "GET", "/v1/models", {"Host": "attacker.test"}) == 403
    assert raw_status(window, "POST", "/v1/completions", {"Content-Type": "text/plain"}, b'{"prompt": "x"}') == 415
    qtbot.waitUntil(lambda: "POST /v1/completions 415" in panel.log_view.toPlainText(), timeout=10_000)
    assert "GET /v1/models 403" in panel.log_view.toPlainText()

    panel.switch.setChecked(False)
    assert not window.server.running and window.server.queue is None
    assert server_threads() == [] and not status.isVisible()
    # The app answers as before, straight to its engine.
    message = ask(qtbot, window, "Hello?")
    assert message.role == "assistant" and message.content


def test_the_apps_answer_waits_its_turn_behind_a_server_request(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=16))
    window.server.start(port=0)
    status = server_status(window)
    client = client_for(window)
    stream = client.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", prompt="1, 2, 3, 4, 5, 6,", max_tokens=1024, temperature=0, stream=True
    )
    next(stream)  # the engine is busy with the client's answer

    ask(qtbot, window, "What is two plus two?", wait=False)
    qtbot.waitUntil(lambda: "Your answer waits its turn" in status.text(), timeout=10_000)
    assert window.session.busy  # it counts as running for the window: Stop would cancel it while it waits

    stream.close()  # the client leaves: its generation stops, and the app's answer runs
    wait_answer(qtbot, window)
    assert window.session.messages[-1].role == "assistant" and window.session.messages[-1].content
    assert "waits its turn" not in status.text()
    record = next(r for r in window.server.log.records() if r.path == "/v1/completions")
    assert record.finish == "cancelled" and record.n_tokens < 1024
    window.server.stop()
    assert server_threads() == []
