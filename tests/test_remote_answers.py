"""A chat answered by a remote engine: AnswerController and RemoteAnswers with the real store, against
a real Specula server on loopback (tests/test_remote_servers.py's fixture, a subprocess) and the
scripted fault server (tests/test_remote_scripted.py's). The engine side is the fake EngineHost: a
remote answer must never reach it. Waits are bounded; nothing asserts a duration.
"""

from __future__ import annotations

import socket

import pytest

from app.bridge.answer_controller import AnswerController
from app.bridge.model_controller import ModelController
from app.bridge.remote_answers import REMOTE_REQUEST_IDS, is_remote_request
from app.chat.chat_view import MessageWidget
from app.chat.stats_footer import DetailsPanel, StatsFooter
from app.core.figures import figures, headline
from app.core.load_guard import LoadGuard
from app.core.remote_engines import RemoteEngine, remote_ref
from app.core.settings import ModelSettings, Settings
from app.core.store import Store
from engine import AnswerStats, FinishReason
from tests import test_remote_scripted, test_remote_servers
from tests.fake_host import FakeEngineHost
from tests.test_remote_scripted import KEY as SCRIPTED_KEY
from tests.test_remote_scripted import chunk, cut_after, first_then_hang, send_json, streams
from tests.test_remote_servers import KEY as SPECULA_KEY
from tests.test_remote_servers import SPECULA_MODEL, WAIT_S

# Their fixtures, used here by name: the Specula server subprocess, the scripted fault server.
specula = test_remote_servers.specula
scripted_server = test_remote_scripted.scripted_server
scripted = test_remote_scripted.scripted

WAIT_MS = WAIT_S * 1000  # bound for an answer to end: only a hang reaches it


class Keys:
    """ApiKeys' one method the controller uses."""

    def __init__(self, keys: dict[str, str]):
        self.keys = keys

    def get(self, engine_id: str) -> str | None:
        return self.keys.get(engine_id)


class Rig:
    def __init__(self, tmp_path, base_url: str, key: str | None = None, model: str = "m", max_tokens: int = 24):
        self.host = FakeEngineHost()
        self.store = Store(tmp_path / "chats.sqlite")
        self.models = ModelController(self.host, LoadGuard(tmp_path / "load_guard.json"))
        self.engine = RemoteEngine("GPU box", base_url)
        self.answers = AnswerController(
            self.host, self.store, self.models, api_keys=Keys({self.engine.id: key} if key else {})
        )
        self.settings = Settings(
            target=ModelSettings(remote_ref(self.engine.id, model)),
            temperature=0.0,
            max_tokens=max_tokens,
            remote_engines=[self.engine],
        )
        self.conv = self.store.create_conversation("Counting")
        self.messages = [self.store.add_message(self.conv.id, "user", "Count from 1 to 100, separated by commas.")]
        self.answers.shown_conversation = self.conv.id
        self.shown: list[str] = []
        self.ended: list = []
        self.notices: list[str] = []
        self.answers.tokens_arrived.connect(lambda _id, tokens: self.shown.extend(t.text for t in tokens))
        self.answers.answer_ended.connect(lambda message, _shown: self.ended.append(message))
        self.answers.notice.connect(self.notices.append)

    def ask(self, qtbot):
        """Ask, wait for the end; the stored answer."""
        message = self.answers.ask(self.conv.id, self.messages, self.settings)
        assert message is not None
        qtbot.waitUntil(lambda: bool(self.ended), timeout=WAIT_MS)
        assert not self.answers.busy
        return self.store.message(message.id)

    def close(self) -> None:
        self.answers.close()
        self.store.close()


@pytest.fixture
def rig_at(qtbot, tmp_path):
    rigs = []

    def make(*args, **kwargs) -> Rig:
        rigs.append(Rig(tmp_path, *args, **kwargs))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


# -- a real Specula server ----------------------------------------------------------------------------


def test_a_remote_answer_streams_into_the_store_saying_where_it_was_computed(qtbot, rig_at, specula):
    _, url = specula
    rig = rig_at(url, SPECULA_KEY, SPECULA_MODEL)
    answer = rig.ask(qtbot)
    assert answer.complete and answer.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert answer.content and answer.content == "".join(rig.shown)  # what streamed is what was kept
    assert answer.params["remote"] == {"engine": "GPU box", "host": "127.0.0.1", "model": SPECULA_MODEL}
    assert answer.params["target"] == SPECULA_MODEL and answer.params["draft"] is None
    stats = answer.stats
    assert stats.remote["source"] == "specula" and stats.remote["host"] == "127.0.0.1"
    assert stats.remote["n_drafted"] > 0 and 0.0 <= stats.remote["acceptance_rate"] <= 1.0
    assert stats.backend == "remote · 127.0.0.1" and stats.n_tokens > 0
    assert rig.host.requests == [] and rig.host.forgotten == []  # nothing reached the engine or the history index
    texts = [text for text, _tip in figures(stats, answer.params)]
    assert texts[0] == "computed on 127.0.0.1" and texts[1].startswith("Specula: ")
    assert texts[1].endswith(f" of {stats.remote['n_drafted']} drafted tokens accepted")
    # Compare is not offered: there is no plain run on this computer to compare with
    assert not rig.answers.compare(answer, rig.messages)
    assert "computed on 127.0.0.1" in rig.notices[-1] and not rig.answers.busy


def test_stop_mid_answer_ends_it_as_stopped_with_the_text_so_far(qtbot, rig_at, specula):
    _, url = specula
    rig = rig_at(url, SPECULA_KEY, SPECULA_MODEL, max_tokens=900)
    rig.answers.tokens_arrived.connect(lambda *_: rig.answers.stop())  # Stop at the first text
    answer = rig.ask(qtbot)
    assert answer.finish_reason == FinishReason.CANCELLED and answer.error is None
    assert answer.content and answer.content == "".join(rig.shown)
    assert answer.stats.remote["host"] == "127.0.0.1"


# -- the scripted fault server ----------------------------------------------------------------------


def test_a_stream_cut_mid_answer_keeps_the_partial_text_marked_as_cut_off(qtbot, rig_at, scripted):
    scripted.routes["POST /v1/chat/completions"] = cut_after(chunk(content="The an"), chunk(content="swer is"))
    rig = rig_at(scripted.url)
    answer = rig.ask(qtbot)
    assert answer.finish_reason == FinishReason.ERROR and answer.content == "The answer is"
    assert answer.error.startswith("The answer was cut off: ") and "kept, marked as cut off" in answer.error
    widget = MessageWidget(answer, colours=False)
    qtbot.addWidget(widget)
    assert widget.meta_label.text() == "on 127.0.0.1 (remote)"


def test_a_refused_key_says_so_and_no_key_is_sent_where_none_was_set(qtbot, rig_at, scripted):
    route = lambda h: send_json(h, 401, {"error": {"message": "Invalid API key"}})  # noqa: E731
    scripted.routes["POST /v1/chat/completions"] = route
    rig = rig_at(scripted.url, key=SCRIPTED_KEY)
    answer = rig.ask(qtbot)
    assert answer.finish_reason == FinishReason.ERROR and answer.content == ""
    assert "refused the API key (HTTP 401)" in answer.error and "Check the API key" in answer.error
    assert SCRIPTED_KEY not in answer.error and not answer.error.startswith("The answer was cut off")
    assert scripted.requests[-1][2]["authorization"] == f"Bearer {SCRIPTED_KEY}"


def test_nothing_listening_says_the_server_is_unreachable(qtbot, rig_at):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again at once: nothing listens there
    rig = rig_at(f"http://127.0.0.1:{port}/v1")
    answer = rig.ask(qtbot)
    assert answer.finish_reason == FinishReason.ERROR
    assert answer.error.startswith(f"Could not reach http://127.0.0.1:{port}: connection refused")


def test_figures_the_server_did_not_give_are_said_to_be_missing(qtbot, rig_at, scripted):
    scripted.routes["POST /v1/chat/completions"] = streams(chunk(content="Hi"), chunk(finish="stop"))
    rig = rig_at(scripted.url)
    answer = rig.ask(qtbot)
    assert answer.finish_reason == FinishReason.STOP and answer.content == "Hi"
    assert answer.stats.remote["source"] == "client"
    assert figures(answer.stats, answer.params)[1][0] == "the server gave no speculation figures"


def test_closing_the_app_mid_answer_keeps_it_as_stopped(qtbot, rig_at, scripted):
    scripted.routes["POST /v1/chat/completions"] = first_then_hang(scripted)
    rig = rig_at(scripted.url)
    message = rig.answers.ask(rig.conv.id, rig.messages, rig.settings)
    qtbot.waitUntil(lambda: bool(rig.shown), timeout=WAIT_MS)
    rig.answers.close()
    assert rig.answers.remote.running == []  # the stream's thread has ended
    stored = rig.store.message(message.id)
    assert stored.finish_reason == FinishReason.CANCELLED and stored.content == "First"


def test_a_chat_whose_remote_engine_was_removed_gets_a_notice_and_no_answer(qtbot, rig_at):
    rig = rig_at("http://127.0.0.1:9/v1")
    rig.settings.remote_engines = []
    assert rig.answers.ask(rig.conv.id, rig.messages, rig.settings) is None
    assert "remote engine was removed" in rig.notices[-1] and "choose another model" in rig.notices[-1]
    assert not rig.answers.busy and len(rig.store.messages(rig.conv.id)) == 1


def test_remote_request_ids_never_meet_the_engine_hosts():
    assert is_remote_request(REMOTE_REQUEST_IDS) and not is_remote_request(1)


# -- the figures' words (pure) and the footer ------------------------------------------------------


def remote_stats(source: str, **figures) -> AnswerStats:
    remote = {"source": source, "host": "gpu.lan", "client_tps": 41.5, "client_ttft_s": 0.32, "note": ""}
    return AnswerStats(n_tokens=120, gen_s=3.0, remote=remote | figures)


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("specula", "Specula: 63% of 120 drafted tokens accepted"),
        ("llama-server", "llama-server: 63% of 120 drafted tokens accepted"),
        ("vllm", "vLLM: 63% of 120 drafted tokens accepted"),
        ("sglang", "SGLang: 63% of 120 drafted tokens accepted"),
    ],
)
def test_the_footer_names_who_reported_the_speculation(source, said):
    stats = remote_stats(source, n_drafted=120, n_accepted=76, acceptance_rate=76 / 120, server_tps=55.0)
    (where, _), (speculation, tip), (tps, tps_tip), (tokens, _), (first, _) = figures(stats, {})
    assert where == "computed on gpu.lan" and headline(stats) == figures(stats, {})[0]
    assert speculation == said and "76 of 120" in tip
    assert tps == "41.5 tok/s measured here" and "55.0 tok/s itself" in tps_tip
    assert tokens == "120 tokens" and first == "first token 0.32 s measured here"


def test_a_rate_without_counts_and_a_server_that_drafted_nothing_are_said_as_such():
    rate_only = remote_stats("vllm", n_drafted=50, acceptance_rate=0.5)
    assert figures(rate_only, {})[1][0] == "vLLM: 50% of 50 drafted tokens accepted"
    note = "llama-server drafted nothing for this answer (no draft model, or no draft was tried)."
    none = remote_stats("llama-server", n_drafted=None, note=note)
    assert figures(none, {})[1] == ("llama-server: no speculation figures", note)


def test_no_server_figures_are_said_to_be_missing_with_the_note_as_tooltip():
    note = "The server gave no speculation figures; tokens/s and time to first token are measured here."
    stats = remote_stats("client", note=note)
    assert figures(stats, {})[1] == ("the server gave no speculation figures", note)
    assert "×" not in " ".join(text for text, _ in figures(stats, {}))  # no estimate against a plain run here


def test_details_and_footer_of_a_remote_answer(qtbot):
    stats = remote_stats("specula", n_drafted=120, n_accepted=76, acceptance_rate=76 / 120)
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.set_params({"remote": {"host": "gpu.lan"}})
    footer.set_stats(stats)
    footer.show()
    assert footer.details_button.isVisible() and not footer.compare_button.isEnabled()
    assert not footer.chart.isVisible()
    panel = DetailsPanel()
    qtbot.addWidget(panel)
    panel.set_stats(stats, {"target": "m"})
    panel.show()
    assert "computed on gpu.lan" in panel.drafters.text() and "Specula: 63% of 120" in panel.drafters.text()
    assert "rounds are not reported by remote servers" in panel.drafters.text()
    assert not panel.accepted_chart.isVisible() and not panel.histogram.isVisible()
    assert AnswerStats.from_dict(stats.to_dict()).remote == stats.remote  # kept with stored answers
