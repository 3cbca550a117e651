"""The conversation on screen and what the user does with it, without a widget.

ChatSession owns the open conversation, its messages and its own settings, and every change to
them: send, regenerate (the old answer kept as an alternate), show an alternate, edit, compare
with plain decoding, open, start, rename, pin and delete chats. An answer whose chat chose other
models than those loaded waits for them here (the wait-for-models handshake with
ModelController). `busy` is the one answer of the app running or waiting.

It emits what changed; MainWindow draws it. Threading: GUI thread only, like the controllers it
drives; nothing here waits on the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.bridge.answer_controller import AnswerController
from app.bridge.host import EngineHostApi
from app.bridge.model_controller import EngineState, ModelController
from app.core.answers import STORE_WRITE_ERRORS, write_problem
from app.core.attachments import Attachment
from app.core.chat_settings import ChatSettings
from app.core.remote_engines import is_remote, parse_remote_ref
from app.core.settings import Settings
from app.core.store import Conversation, Message, Role, Store, title_from


@dataclass(frozen=True)
class WaitingAnswer:
    """An answer asked for while its chat's models load: written once they are ready."""

    conversation_id: int
    variant_of: int | None  # the answer group it regenerates, or None
    replacing: int | None  # the answer hidden meanwhile, shown again if none is written


class ChatSession(QObject):
    conversation_changed = Signal(object)  # another Conversation on screen, or None (a new chat)
    title_changed = Signal(str)  # the conversation on screen was renamed
    messages_reset = Signal(object, object, object)  # [Message], the streaming answer's id and tokens (or None)
    message_added = Signal(object, bool)  # Message, whether it streams
    message_replaced = Signal(int, object)  # the id on screen, the Message shown in its place
    message_removed = Signal(int)
    answer_ended = Signal(object, bool)  # Message (stored, complete), whether it is on screen
    comparison_changed = Signal(int, object, bool)  # answer id, comparison dict or None, running
    chat_settings_changed = Signal()  # this chat's own settings
    models_chosen = Signal()  # the chat on screen (and perhaps the app) chose other models
    busy_changed = Signal(bool)
    conversations_changed = Signal()  # the list of chats (titles, order, pins)
    conversation_deleted = Signal(int, str)  # id, title: the sidebar offers Undo
    notice = Signal(str, str)  # text, kind ("error" or "info")
    model_needed = Signal()  # a message was sent before any model was chosen

    def __init__(
        self,
        store: Store,
        host: EngineHostApi,
        models: ModelController,
        answers: AnswerController,
        settings: Callable[[], Settings],
        save_settings: Callable[[], None],
        parent: QObject | None = None,
    ):
        """settings: the app's settings now (replaced when Settings is applied); save_settings keeps them."""
        super().__init__(parent)
        self.store, self.host, self.models, self.answers = store, host, models, answers
        self._settings, self._save_settings = settings, save_settings
        self._conversation: Conversation | None = None
        self.messages: list[Message] = []
        self.new_chat_settings = ChatSettings()  # what a chat not yet started chose ("This chat…")
        self.waiting: WaitingAnswer | None = None
        answers.busy_changed.connect(self._emit_busy)
        answers.answer_started.connect(self._on_answer_started)
        answers.answer_ended.connect(self._on_answer_ended)
        answers.comparison_changed.connect(self._on_comparison)
        models.ready.connect(self._on_models_ready)
        models.load_failed.connect(self.cancel_waiting)
        models.chosen.connect(self.use_models)

    # -- state ----------------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation | None:
        """The conversation on screen (None: a new chat). Only its answer's tokens are shown."""
        return self._conversation

    def _set_conversation(self, conversation: Conversation | None) -> None:
        self._conversation = conversation
        self.answers.shown_conversation = conversation.id if conversation else None
        self.conversation_changed.emit(conversation)

    @property
    def busy(self) -> bool:
        """An answer runs (or waits for its models): sending, editing and regenerating wait for it."""
        return self.answers.active is not None or self.waiting is not None

    @property
    def settings(self) -> Settings:
        return self._settings()

    @property
    def chat_settings(self) -> ChatSettings:
        """What the conversation on screen chose for itself (a new chat: what it will start with)."""
        if self.conversation is None:
            return self.new_chat_settings
        return ChatSettings.from_dict(self.conversation.settings)

    def effective_settings(self) -> Settings:
        """The settings an answer in the conversation on screen is written with."""
        return self.chat_settings.applied_to(self.settings)

    def message(self, message_id: int) -> tuple[int, Message] | None:
        """(index, message) of a message on screen."""
        return next(((i, m) for i, m in enumerate(self.messages) if m.id == message_id), None)

    def last(self, role: Role) -> Message | None:
        return next((m for m in reversed(self.messages) if m.role == role), None)

    # -- conversations --------------------------------------------------------------------------

    def open_conversation(self, conversation_id: int) -> bool:
        """Show a stored conversation (its streaming answer goes on); False if it is open already or gone."""
        if self.conversation and self.conversation.id == conversation_id:
            return False
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return False
        self.answers.flush()  # the store holds what is streaming before it is read back
        self.cancel_waiting()
        self.messages = self.store.messages(conv.id)
        self._set_conversation(conv)
        self.messages_reset.emit(self.messages, *self.answers.streaming_in(conv.id))
        if job := self.answers.comparing:
            self.comparison_changed.emit(job.message_id, None, True)  # still comparing it
        self.chat_settings_changed.emit()
        if missing := self.chat_settings.missing_model(self.settings):
            remote = parse_remote_ref(missing)
            gone = (
                f"{remote[1]} on a remote engine that was removed from Settings"
                if remote
                else f"{Path(missing).name}, which is no longer on this computer"
            )
            self.notice.emit(
                f"This chat used {gone}: it continues with "
                f"{Path(self.settings.target.path).name or 'the model you choose'}.",
                "info",
            )
        self.follow_chat_models()
        return True

    def new_conversation(self) -> None:
        self.cancel_waiting()
        self.new_chat_settings = ChatSettings()  # a new chat starts from the app's settings
        self.messages = []
        self._set_conversation(None)
        self.messages_reset.emit([], None, None)
        self.chat_settings_changed.emit()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        if self.conversation and self.conversation.id == conversation_id:
            self.conversation.title = title
            self.title_changed.emit(title)

    def pin_conversation(self, conversation_id: int, pinned: bool) -> None:
        try:
            self.store.set_pinned(conversation_id, pinned)
        except STORE_WRITE_ERRORS as e:
            self.notice.emit(write_problem(e, "the pin"), "error")
            return
        self.conversations_changed.emit()

    def delete_conversation(self, conversation_id: int) -> None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        if (rec := self.answers.active) and rec.message.conversation_id == conversation_id:
            self.answers.stop()
        self.store.delete_conversation(conversation_id)
        # Its text leaves the history index now, not at the purge: Undo brings the chat back, but
        # not its tokens there (only answers written after it are added again).
        self.host.forget_history(conversation_id)
        if self.conversation and self.conversation.id == conversation_id:
            self.new_conversation()
        self.conversations_changed.emit()
        self.conversation_deleted.emit(conversation_id, conv.title)

    def undo_delete(self, conversation_id: int) -> None:
        self.store.undo_delete(conversation_id)
        self.conversations_changed.emit()
        self.open_conversation(conversation_id)
        self.conversations_changed.emit()

    def reload_messages(self) -> None:
        """Read the conversation on screen back from the store and show it afresh."""
        if self.conversation:
            self.answers.flush()
            self.messages = self.store.messages(self.conversation.id)
            self.messages_reset.emit(self.messages, *self.answers.streaming_in(self.conversation.id))

    # -- this chat's settings and models --------------------------------------------------------

    def set_chat_settings(self, chat: ChatSettings) -> None:
        """Remember what the conversation on screen chose (a new chat: when its first message is sent)."""
        if self.conversation is None:
            self.new_chat_settings = chat
        else:
            try:
                self.store.set_chat_settings(self.conversation.id, chat.to_dict())
            except STORE_WRITE_ERRORS as e:
                self.notice.emit(write_problem(e, "this chat's settings"), "error")
                return
            self.conversation.settings = chat.to_dict()
        self.chat_settings_changed.emit()

    def choose_models(self, target: str, draft: str) -> None:
        """The user chose models: remembered by the chat on screen, and the app's default from now on
        unless it is a remote model (the app's default is what loads at start, on this computer)."""
        if not is_remote(target):
            settings = self.settings
            settings.target.path, settings.draft.path = target, draft
            self._save_settings()
        chat = self.chat_settings
        chat.target, chat.draft = target, draft
        self.set_chat_settings(chat)
        self.models_chosen.emit()

    @Slot(str, str)
    def use_models(self, target: str, draft: str) -> None:
        """Chat with these models from now on: chosen, then loaded."""
        self.choose_models(target, draft)
        self.load_models()

    def follow_settings(self, previous: Settings) -> None:
        """Settings were applied (previous: what they were): models chosen there are this chat's too,
        and what the models are loaded with changed, they load again (a chat format alone: re-set)."""
        new = self.settings
        if (new.target.path, new.draft.path) != (previous.target.path, previous.draft.path):
            self.choose_models(new.target.path, new.draft.path)
        reload = not self.remote and (
            self.effective_settings().load_key() != self.models.loaded_key or self.models.state == EngineState.FAILED
        )
        if reload and new.target.path:
            self.answers.stop()
            self.load_models()
        elif new.chat_template() != previous.chat_template() and self.models.state == EngineState.READY:
            self.host.set_chat_template(new.chat_template())

    def use_remote(self, ref: str) -> None:
        """Chat with a remote engine's model (its reference) from now on: nothing loads here."""
        self.choose_models(ref, "")

    @property
    def remote(self) -> bool:
        """The conversation on screen is answered by a remote engine."""
        return is_remote(self.effective_settings().target.path)

    def load_models(self) -> bool:
        """Load the models the conversation on screen uses (its own, or the app's); False: none is chosen.
        A remote model needs nothing loaded here: True."""
        if self.remote:
            return True
        return self.models.load(self.effective_settings())

    def follow_chat_models(self) -> bool:
        """Load the models the conversation on screen chose, if others are loaded; True if a load started.

        Not while an answer runs or waits for its models: that one keeps the models it was asked with.
        """
        if self.busy or self.models.state not in (EngineState.READY, EngineState.FAILED) or self.remote:
            return False
        settings = self.effective_settings()
        if not settings.target.path or settings.load_key() == self.models.loaded_key:
            return False
        return self.load_models()

    def use_draft(self, draft_path: str) -> None:
        """Another draft ("" for none): reload with it; no draft at all just drops the loaded one."""
        self.choose_models(self.effective_settings().target.path, draft_path)
        if not draft_path and self.models.state == EngineState.READY:
            self.eject("draft")
        elif self.settings.target.path:
            self.answers.stop()
            self.load_models()

    def eject(self, which: str) -> None:
        """Unload the models ("target") or only the draft ("draft"); the settings forget an ejected draft."""
        self.answers.stop()
        if which == "draft":
            self.choose_models(self.models.loaded_paths[0] or self.effective_settings().target.path, "")
            self.models.loaded_key = self.effective_settings().load_key()  # the target alone is loaded now
            self.models.unload_draft()
        else:
            self.models.unload()

    # -- asking ---------------------------------------------------------------------------------

    def send_message(self, text: str, attachments: list[Attachment], editing_id: int | None = None) -> bool:
        """Send text as the user's next message (or in place of the message being edited, dropping
        the ones after it) and start the answer. False: nothing was sent (the text stays with the user)."""
        text = text.strip()
        if not (text or attachments) or self.busy:
            return False
        if not self.settings.target.path:
            self.model_needed.emit()
            return False
        try:
            if editing_id is not None and self.conversation is not None:
                self.store.update_content(editing_id, text)
                self.store.set_attachments(editing_id, attachments)
                self.store.delete_messages_after(editing_id)
                self.messages = self.store.messages(self.conversation.id)
                self.messages_reset.emit(self.messages, None, None)
            else:
                if self.conversation is None:
                    title = title_from(text or attachments[0].name)
                    self._set_conversation(self.store.create_conversation(title, self.new_chat_settings.to_dict()))
                message = self.store.add_message(self.conversation.id, Role.USER, text, attachments=attachments)
                self.messages.append(message)
                self.message_added.emit(message, False)
        except STORE_WRITE_ERRORS as e:
            self.notice.emit(write_problem(e, "your message"), "error")
            return False
        self.conversations_changed.emit()
        self._answer()
        return True

    def regenerate(self, message_id: int) -> None:
        """Write the last answer again; the one it replaces stays as an alternate (‹ 1/2 ›)."""
        if self.busy or not self.messages or self.messages[-1].id != message_id:
            return
        answer = self.messages[-1]
        try:
            self.store.hide_message(message_id)
        except STORE_WRITE_ERRORS as e:
            self.notice.emit(write_problem(e, "the answer"), "error")
            return
        self.messages.pop()
        self.message_removed.emit(message_id)
        self._answer(variant_of=answer.group, replacing=message_id)

    def regenerate_last(self) -> None:
        if self.messages and self.messages[-1].role == Role.ASSISTANT:
            self.regenerate(self.messages[-1].id)

    def show_variant(self, message_id: int, variant_id: int) -> None:
        """Show another alternate of an answer in its place (‹ ›); later messages stay as they are."""
        if self.busy or self.conversation is None:
            return
        try:
            self.store.show_variant(variant_id)
        except STORE_WRITE_ERRORS as e:
            self.notice.emit(write_problem(e, "your choice of answer"), "error")
            return
        shown = self.store.message(variant_id)
        if shown is None:
            return
        if (found := self.message(message_id)) is None:  # taken off the screen (a regenerate that did not start)
            self.messages.append(shown)
            self.message_added.emit(shown, False)
        else:
            self.messages[found[0]] = shown
            self.message_replaced.emit(message_id, shown)

    def compare_with_plain(self, message_id: int) -> None:
        if (found := self.message(message_id)) is not None:
            index, answer = found
            self.answers.compare(answer, self.messages[:index])

    def stop(self) -> None:
        """Stop the answer, or the wait for its models (the models go on loading)."""
        if self.waiting is not None:
            self.cancel_waiting()
        else:
            self.answers.stop()

    def _answer(self, variant_of: int | None = None, replacing: int | None = None) -> Message | None:
        """Answer the conversation on screen; if it chose other models than those loaded, after loading them.

        replacing: the answer a regenerate hid; shown again if no new answer starts.
        """
        if not self.remote and (self.models.state == EngineState.LOADING or self.follow_chat_models()):
            self._wait(WaitingAnswer(self.conversation.id, variant_of, replacing))
            return None
        answer = self.answers.ask(
            self.conversation.id,
            self.messages,
            self.effective_settings(),
            variant_of,
            collections=self.chat_settings.collections,
            tool_servers=self.chat_settings.mcp_servers,
            allowed_tools=self.chat_settings.allowed_tools,
            documents_to=self.chat_settings.documents_to,
        )
        if answer is None and replacing is not None:
            self.show_variant(replacing, replacing)
        return answer

    def _wait(self, waiting: WaitingAnswer | None) -> None:
        """An answer waits for its chat's models (None: no longer); Stop stays offered meanwhile."""
        self.waiting = waiting
        self._emit_busy()

    @Slot()
    def cancel_waiting(self, *_args) -> None:
        """The answer waiting for its models will not be written: a regenerated one comes back."""
        if (waiting := self.waiting) is None:
            return
        self._wait(None)
        if waiting.replacing is not None:
            if self.conversation is not None and self.conversation.id == waiting.conversation_id:
                self.show_variant(waiting.replacing, waiting.replacing)
            else:
                self.store.show_variant(waiting.replacing)

    # -- what the controllers report ------------------------------------------------------------

    @Slot(object)
    def _on_models_ready(self, _info) -> None:
        if (waiting := self.waiting) is not None:
            self._wait(None)
            self._answer(waiting.variant_of, waiting.replacing)  # it stopped waiting if the user left its chat

    @Slot()
    def _emit_busy(self, *_args) -> None:
        self.busy_changed.emit(self.busy)

    @Slot(object)
    def _on_answer_started(self, message: Message) -> None:
        self.messages.append(message)
        self.message_added.emit(message, True)

    @Slot(object, bool)
    def _on_answer_ended(self, message: Message, shown: bool) -> None:
        if shown and (found := self.message(message.id)):
            # Read back from the store mid-answer (its chat was left and opened again): the finished one.
            self.messages[found[0]] = message
        self.answer_ended.emit(message, shown)
        self.conversations_changed.emit()

    @Slot(int, object, bool)
    def _on_comparison(self, message_id: int, comparison: dict | None, running: bool) -> None:
        if comparison is not None and (found := self.message(message_id)):
            found[1].comparison = comparison
        self.comparison_changed.emit(message_id, comparison, running)
