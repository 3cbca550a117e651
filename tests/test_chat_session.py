"""The chat session without a window or a model: what the user does with a conversation, and what
the window is told.

The engine's side is tests/fake_host.py's FakeEngineHost (a seam we own, held to the same Protocol
as the real EngineHost); the store, the load guard, both controllers and the session are the real
ones. Assertions are on the session's signals, the requests the engine would get, and the store.
"""

from __future__ import annotations

import copy
import pathlib
import socket

import pytest

from app.bridge.answer_controller import AnswerController
from app.bridge.host import EngineHostApi
from app.bridge.model_controller import EngineState, ModelController
from app.bridge.worker import EngineHost
from app.core.chat_settings import ChatSettings
from app.core.load_guard import LoadGuard
from app.core.remote_engines import RemoteEngine, remote_ref
from app.core.settings import ModelSettings, Settings
from app.core.store import Role, Store
from app.session.chat_session import ChatSession
from engine import FinishReason
from engine.config import ChatMessage
from tests.fake_host import FakeEngineHost

SIGNALS = [
    "conversation_changed",
    "title_changed",
    "messages_reset",
    "message_added",
    "message_replaced",
    "message_removed",
    "answer_ended",
    "comparison_changed",
    "chat_settings_changed",
    "models_chosen",
    "busy_changed",
    "conversations_changed",
    "conversation_deleted",
    "notice",
    "model_needed",
]


class Rig:
    def __init__(self, tmp_path):
        # Model files that exist (a chat's choice of a missing file is not used) but are never read.
        self.target, self.other = str(tmp_path / "target.gguf"), str(tmp_path / "other.gguf")
        for path in (self.target, self.other):
            pathlib.Path(path).touch()
        self.host = FakeEngineHost()
        self.store = Store(tmp_path / "chats.sqlite")
        self.settings = Settings(target=ModelSettings(self.target), temperature=0.0)
        self.saved = 0
        self.models = ModelController(self.host, LoadGuard(tmp_path / "load_guard.json"))
        self.answers = AnswerController(self.host, self.store, self.models)
        self.session = ChatSession(self.store, self.host, self.models, self.answers, lambda: self.settings, self._save)
        self.events: list[tuple[str, tuple]] = []
        for name in SIGNALS:
            getattr(self.session, name).connect(lambda *args, name=name: self._seen(name, args))

    def _seen(self, name: str, args: tuple) -> None:
        # A list as it was when emitted: the session goes on appending to its messages.
        self.events.append((name, tuple(list(a) if isinstance(a, list) else a for a in args)))

    def _save(self) -> None:
        self.saved += 1

    def named(self, name: str) -> list[tuple]:
        return [args for n, args in self.events if n == name]

    def load(self) -> None:
        """The models the settings choose, loaded."""
        assert self.session.load_models()
        self.host.loaded()
        assert self.models.state == EngineState.READY

    def answer(self, text: str) -> None:
        """The engine answers the newest request with text."""
        request = self.host.requests[-1]
        self.host.tokens(request, text)
        self.host.done(request, text)


@pytest.fixture
def rig(qtbot, tmp_path):
    rig = Rig(tmp_path)
    yield rig
    rig.store.close()


def test_the_fake_host_satisfies_the_real_hosts_protocol(qtbot):
    assert isinstance(FakeEngineHost(), EngineHostApi)
    real = EngineHost()
    try:
        assert isinstance(real, EngineHostApi)
    finally:
        real.shutdown()
    methods = [name for name, value in vars(EngineHostApi).items() if callable(value) and not name.startswith("_")]
    assert len(methods) == 9 and all(callable(getattr(FakeEngineHost, name, None)) for name in methods)


def test_sending_in_a_new_chat_creates_it_and_streams_the_answer(rig):
    rig.load()
    rig.events.clear()

    assert rig.session.send_message("  The first primes?  ", [])

    conv = rig.session.conversation
    assert conv is not None and conv.title == "The first primes?"
    assert rig.named("conversation_changed") == [(conv,)]
    (user, streaming), (answer, answer_streaming) = rig.named("message_added")
    assert (user.role, user.content, streaming) == (Role.USER, "The first primes?", False)
    assert answer.role == Role.ASSISTANT and answer_streaming
    assert rig.session.busy and rig.named("busy_changed") == [(True,)]
    (request,) = rig.host.requests
    assert request.messages == [ChatMessage("user", "The first primes?")]
    assert request.remember == conv.id  # the user's own answer feeds the history index

    rig.answer("2, 3, 5")
    assert not rig.session.busy and rig.named("busy_changed")[-1] == (False,)
    ((ended, shown),) = rig.named("answer_ended")
    assert shown and ended.content == "2, 3, 5" and ended.finish_reason == FinishReason.STOP
    assert [m.content for m in rig.session.messages] == ["The first primes?", "2, 3, 5"]
    assert [m.content for m in rig.store.messages(conv.id)] == ["The first primes?", "2, 3, 5"]


def test_nothing_is_sent_while_busy_without_text_or_without_a_model(rig):
    rig.load()
    assert rig.session.send_message("One", [])
    assert not rig.session.send_message("Two", [])  # the first answer still runs
    assert not rig.session.send_message("   ", [])
    assert len(rig.host.requests) == 1 and len(rig.store.messages(rig.session.conversation.id)) == 2

    rig.answer("ok")
    rig.settings.target.path = ""
    rig.events.clear()
    assert not rig.session.send_message("Three", [])
    assert rig.named("model_needed") == [()] and rig.named("message_added") == []
    assert len(rig.store.messages(rig.session.conversation.id)) == 2


def test_regenerate_keeps_the_old_answer_as_an_alternate_and_show_variant_brings_it_back(rig):
    rig.load()
    rig.session.send_message("A name?", [])
    rig.answer("Ada")
    first = rig.session.messages[-1]
    rig.events.clear()

    rig.session.regenerate(first.id)

    assert rig.named("message_removed") == [(first.id,)]
    assert len(rig.host.requests) == 2 and rig.host.requests[-1].messages[-1] == ChatMessage("user", "A name?")
    rig.answer("Grace")
    second = rig.session.messages[-1]
    assert second.content == "Grace" and second.group == first.id
    assert [m.content for m in rig.session.messages] == ["A name?", "Grace"]

    rig.session.show_variant(second.id, first.id)
    assert rig.named("message_replaced")[-1][0] == second.id
    assert [m.content for m in rig.session.messages] == ["A name?", "Ada"]
    assert [m.content for m in rig.store.messages(rig.session.conversation.id)] == ["A name?", "Ada"]


def test_sending_an_edit_replaces_the_message_and_drops_the_ones_after_it(rig):
    rig.load()
    rig.session.send_message("Two plus two?", [])
    rig.answer("Four")
    question = rig.session.messages[0]
    rig.events.clear()

    assert rig.session.send_message("Two plus three?", [], editing_id=question.id)

    (reset,) = rig.named("messages_reset")
    assert [m.content for m in reset[0]] == ["Two plus three?"]
    rig.answer("Five")
    stored = rig.store.messages(rig.session.conversation.id)
    assert [(m.role, m.content) for m in stored] == [(Role.USER, "Two plus three?"), (Role.ASSISTANT, "Five")]


def test_an_answer_waits_for_the_models_its_chat_chose_then_starts(rig):
    rig.load()
    rig.session.set_chat_settings(ChatSettings(target=rig.other))
    rig.events.clear()

    assert rig.session.send_message("Hello", [])

    assert rig.host.loads[-1][0].path == rig.other  # this chat's model is loading
    assert rig.session.busy and rig.session.waiting is not None and rig.host.requests == []
    assert rig.named("busy_changed") == [(True,)]

    rig.host.loaded("other")

    assert rig.session.waiting is None and len(rig.host.requests) == 1 and rig.session.busy
    rig.answer("Hi")
    assert not rig.session.busy and rig.session.messages[-1].content == "Hi"


def test_stopping_the_wait_brings_a_regenerated_answer_back_and_a_failed_load_ends_the_wait(rig):
    rig.load()
    rig.session.send_message("A name?", [])
    rig.answer("Ada")
    first = rig.session.messages[-1]
    rig.session.set_chat_settings(ChatSettings(target=rig.other))

    rig.session.regenerate(first.id)  # waits for the other model
    assert rig.session.waiting is not None and [m.content for m in rig.session.messages] == ["A name?"]
    rig.session.stop()
    assert not rig.session.busy and [m.content for m in rig.session.messages] == ["A name?", "Ada"]
    assert rig.host.requests[-1].messages[-1].content == "A name?" and len(rig.host.requests) == 1

    rig.session.send_message("Again?", [])
    assert rig.session.waiting is not None
    rig.host.load_failed()
    assert rig.session.waiting is None and not rig.session.busy and len(rig.host.requests) == 1


def test_a_new_chat_remembers_the_models_chosen_in_it_and_the_app_follows(rig):
    rig.load()
    rig.session.choose_models(rig.other, "")
    assert (rig.settings.target.path, rig.settings.draft.path) == (rig.other, "") and rig.saved == 1
    assert rig.session.chat_settings.target == rig.other  # the chat not yet started keeps the choice
    rig.session.send_message("Hi", [])
    conv = rig.session.conversation
    assert ChatSettings.from_dict(conv.settings).target == rig.other


def test_deleting_the_chat_on_screen_stops_its_answer_forgets_its_history_and_opens_a_new_chat(rig):
    rig.load()
    rig.session.send_message("Count to ten", [])
    conv = rig.session.conversation
    request = rig.host.requests[-1]
    rig.events.clear()

    rig.session.delete_conversation(conv.id)

    assert request.cancel.is_set() and rig.host.forgotten == [conv.id]
    assert rig.session.conversation is None and rig.session.messages == []
    assert rig.named("conversation_deleted") == [(conv.id, "Count to ten")]
    rig.host.done(request, "1 2", reason=FinishReason.CANCELLED)
    assert not rig.session.busy

    rig.session.undo_delete(conv.id)
    assert rig.session.conversation.id == conv.id
    assert [m.content for m in rig.session.messages] == ["Count to ten", "1 2"]


def test_opening_another_chat_mid_answer_keeps_it_streaming_and_shows_it_again_on_return(rig):
    rig.load()
    rig.session.send_message("First", [])
    first = rig.session.conversation
    rig.host.tokens(rig.host.requests[-1], "one")
    rig.session.new_conversation()
    assert rig.session.conversation is None and rig.session.messages == []
    assert not rig.session.send_message("Second?", [])  # the answer still runs
    rig.events.clear()

    assert rig.session.open_conversation(first.id)
    assert not rig.session.open_conversation(first.id)  # open already

    ((messages, streaming_id, tokens),) = rig.named("messages_reset")
    assert [m.content for m in messages] == ["First", "one"] and streaming_id == messages[-1].id
    assert "".join(t.text for t in tokens) == "one"
    rig.answer(" two")
    assert rig.session.messages[-1].content == " two" and rig.named("answer_ended")[-1][1] is True


def test_renaming_the_chat_on_screen_says_its_new_title(rig):
    rig.load()
    rig.session.send_message("Primes", [])
    conv = rig.session.conversation
    rig.events.clear()
    rig.session.rename_conversation(conv.id, "About primes")
    assert rig.named("title_changed") == [("About primes",)] and rig.named("conversation_changed") == []
    assert rig.store.conversation(conv.id).title == "About primes"


def test_settings_applied_reload_what_changed_and_only_that(rig):
    rig.load()
    loads = len(rig.host.loads)
    previous = copy.deepcopy(rig.settings)

    rig.settings.chat_templates[rig.target] = "chatml"  # the chat format alone: set again, no reload
    rig.session.follow_settings(previous)
    assert len(rig.host.loads) == loads and rig.host.templates[-1] == rig.settings.chat_template()

    previous = copy.deepcopy(rig.settings)
    rig.settings.target.path = rig.other  # another model, chosen in Settings: this chat's too, loaded
    rig.session.follow_settings(previous)
    assert len(rig.host.loads) == loads + 1 and rig.host.loads[-1][0].path == rig.other
    assert rig.session.chat_settings.target == rig.other and rig.models.state == EngineState.LOADING


def test_a_remote_model_is_this_chats_alone_and_loads_nothing_here(qtbot, rig):
    rig.load()
    loads = len(rig.host.loads)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        engine = RemoteEngine("GPU box", f"http://127.0.0.1:{probe.getsockname()[1]}/v1")
    rig.settings.remote_engines = [engine]
    ref = remote_ref(engine.id, "big-model")

    rig.session.use_remote(ref)

    assert rig.session.remote and rig.session.chat_settings.target == ref
    assert rig.settings.target.path == rig.target and rig.named("models_chosen") == [()]  # the app's default stays
    assert len(rig.host.loads) == loads and not rig.session.follow_chat_models()
    assert rig.session.send_message("Hello?", [])
    assert rig.host.requests == []  # never the local engine
    qtbot.waitUntil(lambda: not rig.session.busy, timeout=30_000)
    (ended, _shown) = rig.named("answer_ended")[-1]
    assert ended.finish_reason == FinishReason.ERROR and "Could not reach" in ended.error

    rig.settings.remote_engines = []  # removed in Settings: the chat says so and goes on with the app's model
    conversation = rig.session.conversation.id
    rig.session.new_conversation()
    rig.events.clear()
    rig.session.open_conversation(conversation)
    assert not rig.session.remote and "remote engine that was removed" in rig.named("notice")[-1][0]
