"""The main window: wires the sidebar, the chat, the input box and the status bar to the engine thread.

The window is the only place that knows all the parts. It never waits on the engine: requests
go out as queued signals (EngineHost), events come back as queued signals, and a stop sets the
request's cancel flag directly. Two controllers keep the state the window shows: ModelController
(what is loaded: EngineState) and AnswerController (the answer or comparison running, its end).
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

from PySide6.QtCore import QByteArray, QTimer, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.bridge.answer_controller import AnswerController
from app.bridge.context_counter import ContextCounter
from app.bridge.draft_offer import IDLE_ANSWERS, DraftIdleWatch
from app.bridge.hub_tasks import BackgroundTasks
from app.bridge.local_server import LocalServerController
from app.bridge.model_controller import EngineState, ModelController
from app.bridge.worker import EngineHost
from app.chat.chat_view import ChatView
from app.chat.composer import Composer
from app.chat.model_picker import ModelPicker
from app.chat.sidebar import Sidebar
from app.core.answers import STORE_WRITE_ERRORS, write_problem
from app.core.chat_settings import ChatSettings
from app.core.export import to_json, to_markdown
from app.core.load_guard import LoadGuard
from app.core.settings import Settings
from app.core.store import Conversation, Message, Store, title_from
from app.dialogs.chat_settings_dialog import ChatSettingsDialog
from app.dialogs.downloads import close_downloaders, open_downloader, open_library
from app.dialogs.server_panel import ServerPanel, ServerStatusLabel
from app.dialogs.settings_dialog import SettingsDialog
from app.dialogs.welcome import WelcomePanel
from app.ui import theme
from app.ui.about import about_html
from app.ui.appearance import Appearance, stepped
from app.ui.elided_label import ElidedLabel
from app.ui.menus import build_menus
from app.ui.status_bar import StatusBar
from engine import FinishReason

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    def __init__(
        self,
        store: Store | None = None,
        settings: Settings | None = None,
        *,
        library=None,
        settings_path: Path | None = None,
        auto_setup: bool = False,
    ):
        super().__init__()
        self.store = store or Store()
        self.settings_path = settings_path
        self.settings = settings or Settings.load(settings_path)
        self._library = library
        self.auto_setup = auto_setup
        self.host = EngineHost(self)  # the history index in the data folder (engine.paths.history_dir())
        # Chats deleted before this start were purged by the store just now: their tokens go from the
        # history index too (also the safety net for a forget that a closing engine thread never ran).
        for conversation_id in self.store.purged:
            self.host.forget_history(conversation_id)
        # A model that failed is not reloaded unasked: the guard's record sits beside the settings.
        self.models = ModelController(
            self.host, LoadGuard.beside(settings_path), self, user_names=lambda path: self.library.user_name(path)
        )
        self.draft_watch = DraftIdleWatch(self.host.worker, self)
        self.answers = AnswerController(self.host, self.store, self.models, self)
        self.server = LocalServerController(self.host, self.models, lambda: self.settings, self)
        self.server_panel: ServerPanel | None = None
        self.conversation: Conversation | None = None
        self.messages: list[Message] = []
        self.new_chat_settings = ChatSettings()  # what a chat not yet started chose ("This chat…")
        # An answer waiting for the models its chat chose: (conversation id, variant_of, the answer it
        # regenerates, hidden meanwhile, or None).
        self._answer_after_load: tuple[int, int | None, int | None] | None = None
        self.chat_format = None  # ChatFormatInfo of the loaded model

        self.setWindowTitle("Specula")
        self.setWindowIcon(theme.icon())
        self.background = BackgroundTasks(self, max_threads=1)  # library reads, off the GUI thread
        self._build()
        build_menus(self)
        self._connect_engine()
        self.refresh_sidebar()
        self._restore_geometry()
        QTimer.singleShot(0, self, self.start)

    # -- construction -------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation | None:
        """The conversation on screen (None: a new chat). The answer controller shows only its tokens."""
        return self._conversation

    @conversation.setter
    def conversation(self, conversation: Conversation | None) -> None:
        self._conversation = conversation
        self.answers.shown_conversation = conversation.id if conversation else None

    @property
    def busy(self) -> bool:
        """An answer runs (or waits for its models): sending, editing and regenerating wait for it."""
        return self.answers.active is not None or self._answer_after_load is not None

    @property
    def chat_settings(self) -> ChatSettings:
        """What the conversation on screen chose for itself (a new chat: what it will start with)."""
        if self.conversation is None:
            return self.new_chat_settings
        return ChatSettings.from_dict(self.conversation.settings)

    def _prompt_and_budget(self) -> tuple[str, int]:
        """The system prompt and the answer's token budget: what the context meter counts besides the messages."""
        s = self.effective_settings()
        return s.system_prompt, s.max_tokens

    def effective_settings(self) -> Settings:
        """The settings an answer in the conversation on screen is written with."""
        return self.chat_settings.applied_to(self.settings)

    def _connect_engine(self) -> None:
        """The widgets to the engine thread's model signals and to the two controllers."""
        w = self.host.worker
        w.load_progress.connect(self._on_load_progress)
        w.chat_format_known.connect(self._on_chat_format)
        w.draft_refused.connect(self._on_draft_refused)
        w.starter_progress.connect(self._on_starter_progress)
        w.starter_finished.connect(self._on_starter_finished)
        w.starter_failed.connect(self._on_starter_failed)
        self.models.ready.connect(self._on_loaded)
        self.models.load_failed.connect(self._on_load_failed)
        self.models.unloaded.connect(self._on_unloaded)
        self.model_picker.target_chosen.connect(self.use_model)
        self.model_picker.draft_chosen.connect(self.use_draft)
        self.model_picker.eject_requested.connect(self.eject)
        self.draft_watch.idle.connect(self._offer_draft_unload)
        a = self.answers
        a.busy_changed.connect(self._show_busy)
        a.answer_started.connect(self._on_answer_started)
        a.tokens_arrived.connect(self.chat_view.queue_tokens)
        a.reasoning_arrived.connect(self.chat_view.queue_reasoning)
        a.live_stats.connect(self.chat_view.set_live_stats)
        a.answer_ended.connect(self._on_answer_ended)
        a.comparison_changed.connect(self._show_comparison)
        a.notice.connect(self.chat_view.show_notice)
        a.status_message.connect(lambda text: self.status.showMessage(text, 6000))

    def _build(self) -> None:
        self.sidebar = Sidebar()
        self.sidebar.conversation_selected.connect(self.open_conversation)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.rename_requested.connect(self.rename_conversation)
        self.sidebar.delete_requested.connect(self.delete_conversation)
        self.sidebar.undo_requested.connect(self.undo_delete)
        self.sidebar.export_requested.connect(self.export_conversation)
        self.sidebar.pin_requested.connect(self.pin_conversation)
        self.sidebar.search_changed.connect(lambda _text: self.refresh_sidebar())

        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        header = QHBoxLayout()
        header.setContentsMargins(12, 6, 8, 6)
        self.title_label = ElidedLabel()  # a long title gives way: the buttons beside it stay
        font = self.title_label.font()
        font.setBold(True)
        self.title_label.setFont(font)
        header.addWidget(self.title_label, 1)
        self.model_picker = ModelPicker(lambda: self.library)
        header.addWidget(self.model_picker, 3)
        self.legend = QLabel()
        self.legend.setToolTip("Token colours: who proposed each token of the answers")
        header.addWidget(self.legend)
        self.colours_button = QToolButton()
        self.colours_button.setText("Token colours")
        self.colours_button.setCheckable(True)
        self.colours_button.setToolTip(
            "Colour each token of the answers by its source: accepted from the draft model, from prompt lookup, "
            "from your earlier conversations (history), or produced by the target (Ctrl+T). Hover a token for details."
        )
        self.colours_button.toggled.connect(self.set_token_colours)
        header.addWidget(self.colours_button)
        self.settings_button = QToolButton()
        self.settings_button.setText("Settings")
        self.settings_button.setToolTip("Models, generation and speculation settings (Ctrl+,)")
        self.settings_button.clicked.connect(self.open_settings)
        header.addWidget(self.settings_button)
        column.addLayout(header)
        self.chat_view = ChatView()
        self.chat_view.show_reasoning = self.settings.show_reasoning
        self.chat_view.edit_requested.connect(self.edit_message)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.compare_requested.connect(self.compare_with_plain)
        self.chat_view.variant_requested.connect(self.show_variant)
        column.addWidget(self.chat_view, 1)
        self.composer = Composer()
        self.composer.send_requested.connect(self.send_message)
        self.composer.stop_requested.connect(self.stop_answer)
        self.composer.edit_last_requested.connect(self.edit_last)
        self.chat_settings_button = self.composer.chat_settings_button  # by the input: what this chat sends
        self.chat_settings_button.clicked.connect(self.open_chat_settings)
        column.addWidget(self.composer)
        self.context = ContextCounter(
            self.host,
            self.composer.meter,
            lambda: (self.messages, *self._prompt_and_budget()),
            lambda: (self.composer.text(), self.composer.attachments, self.composer.editing_id),
            self,
        )
        self.composer.draft_changed.connect(self.context.refresh)

        self.welcome = WelcomePanel(starter_available=_starter_available())
        self.welcome.starter_requested.connect(self.assemble_starter)
        self.welcome.download_requested.connect(self.open_downloader)
        self.welcome.add_file_requested.connect(self.add_model_file)

        self.pages = QStackedWidget()
        self.pages.addWidget(page)
        self.pages.addWidget(self.welcome)
        self.chat_page = page

        self.splitter = QSplitter()
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self.pages)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        em = self.fontMetrics().horizontalAdvance("M")
        self.sidebar.setMinimumWidth(em * 10)
        self.splitter.setSizes([em * 18, em * 60])
        # The sidebar grows with the window (longer titles on wide screens) until the user drags it.
        self._sidebar_dragged = False
        self.splitter.splitterMoved.connect(lambda *_: setattr(self, "_sidebar_dragged", True))
        self.setCentralWidget(self.splitter)
        self.status = StatusBar()
        self.status.addPermanentWidget(ServerStatusLabel(self.server))
        self.setStatusBar(self.status)
        self.colours_button.setChecked(self.settings.show_token_colours)
        self.appearance = Appearance(QApplication.instance())
        self.appearance.apply(self.settings.theme, self.settings.text_scale)
        self._update_legend()
        self._update_title()
        self._update_chat_button()

    # -- startup and models -------------------------------------------------------------------

    @property
    def library(self):
        if self._library is None:
            from engine.models.library import ModelLibrary

            self._library = ModelLibrary()
        return self._library

    @Slot()
    def start(self) -> None:
        """Load the configured models; on a first start, find the starter pair or welcome the user."""
        s = self.settings
        if not s.target.path and not s.model_choice_lost:  # never over a choice that could not be read
            from engine.models import starter

            if starter.starter_installed():
                target = starter.models_dir() / starter.TARGET.filename
                draft = starter.models_dir() / starter.DRAFT.filename
                s.target.path, s.draft.path = str(target), str(draft)
                self.save_settings()
        if s.target.path and Path(s.target.path).is_file():
            problem = self.models.load_guard.last_problem(s.target.path)
            if problem is None:
                self.load_models()
            else:
                self._ask_before_loading(problem)
            return
        if s.target.path:
            self.welcome.set_note(f"The model file {s.target.path} is gone. Choose another model.", error=True)
        elif s.model_choice_lost:
            self.welcome.set_note("Your settings could not be read, so no model is chosen. Choose one.", error=True)
        self.show_welcome()
        if self.auto_setup and not s.target.path and not s.model_choice_lost and _starter_available():
            self.assemble_starter()

    def _ask_before_loading(self, problem: str) -> None:
        self.show_chat()
        self.status.models.setText("Model not loaded")
        self.chat_view.show_notice(
            f"{Path(self.settings.target.path).name} was not loaded automatically: {problem}",
            actions=[("Try again", self.load_models), ("Settings…", self.open_settings)],
        )

    def show_welcome(self) -> None:
        self.pages.setCurrentWidget(self.welcome)

    def show_chat(self) -> None:
        self.pages.setCurrentWidget(self.chat_page)

    def load_models(self) -> None:
        """Load the models the conversation on screen uses (its own, or the app's)."""
        settings = self.effective_settings()
        if not self.models.load(settings):  # no target chosen
            self.show_welcome()
            return
        self.show_chat()
        self.chat_view.clear_notices()
        self.status.set_engine(None)
        self.status.models.setText(f"Loading {Path(settings.target.path).name}…")
        self.status.set_progress("Loading target", 0.0)
        self._update_picker()

    @Slot(str, float)
    def _on_load_progress(self, stage: str, fraction: float) -> None:
        if stage == "Ready":
            self.status.set_progress(None)
        else:
            self.status.set_progress(stage, fraction)

    @Slot(object)
    def _on_loaded(self, info) -> None:
        self.status.set_progress(None)
        self.status.set_engine(info)
        self.status.showMessage(f"Ready: {info.target_name}", 4000)
        self._update_picker()
        waiting = self._answer_after_load
        if waiting is not None:
            self._wait_for_models(None)
            self._answer(variant_of=waiting[1], replacing=waiting[2])  # the window stopped waiting if it left

    def loaded_models(self) -> dict[str, str]:
        """path -> "target" / "draft" for the models in memory now (the picker's Eject, the library's badge)."""
        info, (target, draft) = self.models.info, self.models.loaded_paths
        if info is None or self.models.state != EngineState.READY:
            return {}
        loaded = {target: "target"}
        if info.draft_name is not None and draft:
            loaded[draft] = "draft"
        return loaded

    def _update_picker(self) -> None:
        s = self.effective_settings()
        self.model_picker.set_models(s.target.path, s.draft.path, self.loaded_models())

    def _models_chosen(self, target: str, draft: str) -> None:
        """The user chose models: the app's default from now on, and remembered by the chat on screen."""
        self.settings.target.path, self.settings.draft.path = target, draft
        self.save_settings()
        chat = self.chat_settings
        chat.target, chat.draft = target, draft
        self.set_chat_settings(chat)

    def _follow_chat_models(self) -> bool:
        """Load the models the conversation on screen chose, if others are loaded; True if a load started.

        Not while an answer runs or waits for its models: that one keeps the models it was asked with.
        """
        if self.busy or self.models.state not in (EngineState.READY, EngineState.FAILED):
            return False
        settings = self.effective_settings()
        if not settings.target.path or settings.load_key() == self.models.loaded_key:
            return False
        self.load_models()
        return True

    def use_draft(self, entry) -> None:
        """The picker chose a draft (None: none): reload with it; no draft at all just drops the loaded one."""
        self._models_chosen(self.effective_settings().target.path, str(entry.path) if entry is not None else "")
        if entry is None and self.models.state == EngineState.READY:
            self.eject("draft")
        elif self.settings.target.path:
            self.answers.stop()
            self.load_models()

    def eject(self, which: str) -> None:
        """Unload the models ("target") or only the draft ("draft"); the settings forget an ejected draft."""
        self.answers.stop()
        if which == "draft":
            self._models_chosen(self.models.loaded_paths[0] or self.effective_settings().target.path, "")
            self.models.loaded_key = self.effective_settings().load_key()  # the target alone is loaded now
            self.models.unload_draft()
        else:
            self.models.unload()

    @Slot()
    def _on_unloaded(self) -> None:
        self.status.set_engine(None)
        self.status.models.setText("No model loaded: choose one above")
        self._update_picker()

    @Slot(object)
    def _offer_draft_unload(self, info) -> None:
        freed = f" and free {info.draft_memory_bytes / 1e9:.1f} GB" if info.draft_memory_bytes else ""

        def unload() -> None:
            notice.hide()
            self.eject("draft")

        notice = self.chat_view.show_notice(
            f"Auto has not drafted with {info.draft_name} in the last {IDLE_ANSWERS} answers: on this machine "
            f"plain decoding and prompt lookup do better. Unload the draft model{freed}?",
            kind="info",
            actions=[("Unload draft model", unload)],
        )

    @Slot(object)
    def _on_chat_format(self, chat_format) -> None:
        """A base model's file has no chat format: say once per file what Specula uses instead."""
        self.chat_format = chat_format
        path = self.settings.target.path
        if not chat_format.base_model or chat_format.source == "override" or path in self.settings.base_model_notices:
            return
        name = self.models.info.target_name if self.models.info else Path(path).stem
        if chat_format.source == "family":
            text = f"{name} is a base model — no chat format in its file. Specula uses {chat_format.description}."
        else:
            text = (
                f"{name} is a base model — no chat format: its file has none and its family is not known, so "
                "Specula uses ChatML, which it may not follow. Settings → Chat format can set another."
            )
        self.chat_view.show_notice(text, kind="info", actions=[("Settings…", self.open_settings)])
        self.settings.base_model_notices.append(path)
        self.save_settings()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._cancel_waiting()
        self.status.set_progress(None)
        self.status.set_engine(None)
        self.status.models.setText("Model not loaded")
        self.show_chat()
        self.chat_view.show_notice(
            "The model could not be loaded. " + message, actions=[("Settings…", self.open_settings)]
        )

    @Slot(str)
    def _on_draft_refused(self, message: str) -> None:
        self.chat_view.show_notice(
            message + "\nSpecula continues with the target alone.",
            kind="info",
            actions=[("Settings…", self.open_settings)],
        )

    def assemble_starter(self) -> None:
        self.welcome.starter_button.setEnabled(False)
        self.welcome.set_progress(0, 1)
        self.status.set_progress("Setting up the starter models", 0.0)
        self.host.assemble_starter()

    @Slot(int, int)
    def _on_starter_progress(self, done: int, total: int) -> None:
        self.welcome.set_progress(done, total)
        self.status.set_progress("Setting up the starter models", done / max(total, 1))

    @Slot(str, str)
    def _on_starter_finished(self, target: str, draft: str) -> None:
        self.status.set_progress(None)
        self._models_chosen(target, draft)
        self.load_models()

    @Slot(str)
    def _on_starter_failed(self, message: str) -> None:
        self.status.set_progress(None)
        self.welcome.starter_failed(message)

    def add_model_file(self, path: str) -> bool:
        """Add a GGUF file to the library and use it (with the best compatible draft, if any)."""
        try:
            entry = self.library.add_file(path)
        except Exception as e:  # noqa: BLE001 - every failure becomes a message
            message = e.user_message() if hasattr(e, "user_message") else str(e)
            self.welcome.set_note(message, error=True)
            if self.pages.currentWidget() is self.chat_page:
                self.chat_view.show_notice(message)
            return False
        self.use_model(entry)
        return True

    def use_model(self, entry) -> None:
        """Chat with a library entry as the target, with its best compatible draft (if any).

        Finding the draft reads vocabularies (a while for 150k-token ones): on a pool thread.
        """
        library = self.library

        def chosen(drafts: list) -> None:
            if getattr(self, "_shut", False):
                return
            self._models_chosen(str(entry.path), str(drafts[0].path) if drafts else "")
            self.load_models()

        def failed(message: str) -> None:
            log.warning("no draft chosen: %s", message)
            chosen([])

        self.background.start(lambda _report: library.compatible_drafts(entry), chosen, failed)

    def _add_model_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_model_file(path)

    def open_library(self) -> None:
        open_library(self, self.library, self._target_entry(), self.use_model, loaded=self.loaded_models())

    def _target_entry(self):
        path = self.settings.target.path
        return next((e for e in self.library.scan() if str(e.path) == path), None) if path else None

    def open_downloader(self) -> None:
        dialog = open_downloader(self, self.library, self._target_entry())
        dialog.model_downloaded.connect(self._on_model_downloaded)

    def _on_model_downloaded(self, path) -> None:
        if not self.settings.target.path or self.pages.currentWidget() is self.welcome:
            self.add_model_file(str(path))
        else:
            self.status.showMessage(f"Downloaded {Path(path).name}; choose it in Settings.", 8000)

    # -- settings -----------------------------------------------------------------------------

    def open_server_panel(self) -> None:
        if self.server_panel is None:
            self.server_panel = ServerPanel(self.server, self)
        self.server_panel.show()
        self.server_panel.raise_()

    def open_chat_settings(self) -> None:
        title = self.conversation.title if self.conversation else "New chat"
        dialog = ChatSettingsDialog(self.chat_settings, self.settings, title, self)
        if dialog.exec():
            self.apply_chat_settings(dialog.result_chat(), dialog.presets)

    def apply_chat_settings(self, chat: ChatSettings, presets: dict[str, str]) -> None:
        if presets != self.settings.presets:
            self.settings.presets = presets
            self.save_settings()
        self.set_chat_settings(chat)

    def set_chat_settings(self, chat: ChatSettings) -> None:
        """Remember what the conversation on screen chose (a new chat: when its first message is sent)."""
        if self.conversation is None:
            self.new_chat_settings = chat
        else:
            try:
                self.store.set_chat_settings(self.conversation.id, chat.to_dict())
            except STORE_WRITE_ERRORS as e:
                self.chat_view.show_notice(write_problem(e, "this chat's settings"))
                return
            self.conversation.settings = chat.to_dict()
        self._update_chat_button()
        self.context.refresh()

    def _update_chat_button(self) -> None:
        lines = self.chat_settings.summary(self.settings.presets)
        self.chat_settings_button.setText("This chat ●" if lines else "This chat")
        self.chat_settings_button.setToolTip(
            "This chat's system prompt, preset and sampling (Ctrl+Shift+,)"
            + ("<br><br>" + "<br>".join(html.escape(line) for line in lines) if lines else "<br>It follows Settings.")
        )

    def open_settings(self) -> None:
        dialog = SettingsDialog(
            self.settings, self.library, parent=self, erase_history=lambda: self.host.forget_history(None)
        )
        dialog.download_requested.connect(self.open_downloader)
        if dialog.exec():
            self.apply_settings(dialog.result_settings())

    def apply_settings(self, new: Settings) -> None:
        new_template = new.chat_template() != self.settings.chat_template()
        models_changed = (new.target.path, new.draft.path) != (self.settings.target.path, self.settings.draft.path)
        self.settings = new
        self.save_settings()
        if models_changed:  # chosen in Settings: for the chat on screen too
            self._models_chosen(new.target.path, new.draft.path)
        reload = (
            self.effective_settings().load_key() != self.models.loaded_key or self.models.state == EngineState.FAILED
        )
        if reload and new.target.path:
            self.answers.stop()
            self.load_models()
        elif new_template and self.models.state == EngineState.READY:
            self.host.set_chat_template(new.chat_template())
        self.server.refresh_model()  # the server's defaults follow the settings
        self.chat_view.set_show_reasoning(new.show_reasoning)

    def step_text(self, steps: int) -> None:
        """Larger (1), smaller (-1) or the system's size (0), remembered."""
        self.set_appearance(text_scale=stepped(self.settings.text_scale, steps))

    def set_appearance(self, theme_name: str | None = None, text_scale: float | None = None) -> None:
        theme_name = theme_name or self.settings.theme
        text_scale = self.settings.text_scale if text_scale is None else text_scale
        if (theme_name, text_scale) == (self.settings.theme, self.settings.text_scale):
            return
        self.settings.theme, self.settings.text_scale = theme_name, text_scale
        self.theme_actions[theme_name].setChecked(True)
        self.appearance.apply(theme_name, text_scale)
        self.save_settings()
        if self.conversation:  # message widgets size their fonts when built: build them again
            self.answers.flush()
            self.messages = self.store.messages(self.conversation.id)
            self.chat_view.set_messages(self.messages, *self.answers.streaming_in(self.conversation.id))

    def save_settings(self) -> None:
        try:
            self.settings.save(self.settings_path)
        except OSError as e:
            self.status.showMessage(f"Could not save the settings: {e}", 8000)

    def set_token_colours(self, on: bool) -> None:
        self.settings.show_token_colours = on
        self.chat_view.set_colours(on)
        self._update_legend()
        self.save_settings()

    def _update_legend(self) -> None:
        if not self.colours_button.isChecked():
            self.legend.setText("")
            self.legend.setVisible(False)
            return
        pal = self.palette()
        chips = []
        for source in ("draft", "mtp", "lookup", "history"):
            colour = theme.token_background(source, pal)
            chips.append(
                f"<span style='background:{theme.css(colour)}'>&nbsp;{theme.SOURCE_LABELS[source]}&nbsp;</span>"
            )
        chips.append("target (no colour)")
        self.legend.setText("&nbsp;&nbsp;".join(chips))
        self.legend.setVisible(True)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange:
            self._update_legend()

    # -- conversations ------------------------------------------------------------------------

    def refresh_sidebar(self) -> None:
        conversations = self.store.conversations(self.sidebar.search.text())
        self.sidebar.set_conversations(conversations, self.conversation.id if self.conversation else None)

    @Slot(int)
    def open_conversation(self, conversation_id: int) -> None:
        if self.conversation and self.conversation.id == conversation_id:
            return
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        self.answers.flush()  # the store holds what is streaming before it is read back
        self._cancel_waiting()
        self.composer.cancel_edit()
        self.conversation = conv
        self.messages = self.store.messages(conv.id)
        self.chat_view.set_messages(self.messages, *self.answers.streaming_in(conv.id))
        if job := self.answers.comparing:
            self._show_comparison(job.message_id, None, True)  # still comparing it
        self._update_title()
        self._update_chat_button()
        if missing := self.chat_settings.missing_model():
            self.chat_view.show_notice(
                f"This chat used {Path(missing).name}, which is no longer on this computer: it continues with "
                f"{Path(self.settings.target.path).name or 'the model you choose'}.",
                kind="info",
            )
        if not self._follow_chat_models():
            self._update_picker()
        self.context.refresh()
        self.show_chat_if_ready()
        self.composer.input.setFocus()

    def show_chat_if_ready(self) -> None:
        if self.pages.currentWidget() is self.welcome and self.models.state != EngineState.NONE:
            self.show_chat()

    def new_conversation(self) -> None:
        self._cancel_waiting()
        self.composer.cancel_edit()
        self.conversation = None
        self.new_chat_settings = ChatSettings()  # a new chat starts from the app's settings
        self.messages = []
        self._update_chat_button()
        self._update_picker()
        self.chat_view.set_messages([])
        self.sidebar.list.setCurrentRow(-1)
        self._update_title()
        self.context.refresh()
        self.composer.input.setFocus()

    def pin_conversation(self, conversation_id: int, pinned: bool) -> None:
        try:
            self.store.set_pinned(conversation_id, pinned)
        except STORE_WRITE_ERRORS as e:
            self.chat_view.show_notice(write_problem(e, "the pin"))
            return
        self.refresh_sidebar()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        if self.conversation and self.conversation.id == conversation_id:
            self.conversation.title = title
            self._update_title()

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
        self.refresh_sidebar()
        self.sidebar.show_undo(conversation_id, conv.title)

    def undo_delete(self, conversation_id: int) -> None:
        self.store.undo_delete(conversation_id)
        self.refresh_sidebar()
        self.open_conversation(conversation_id)
        self.refresh_sidebar()

    def export_conversation(self, conversation_id: int | None, fmt: str) -> None:
        conv = self.store.conversation(conversation_id) if conversation_id else self.conversation
        if conv is None:
            self.status.showMessage("Open a conversation to export it.", 4000)
            return
        suffix, kind = (".md", "Markdown (*.md)") if fmt == "markdown" else (".json", "JSON (*.json)")
        safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip() or "conversation"
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", str(Path.home() / (safe + suffix)), kind)
        if path:
            self.write_export(conv, fmt, Path(path))

    def write_export(self, conv: Conversation, fmt: str, path: Path) -> None:
        messages = self.store.messages(conv.id)
        text = to_markdown(conv, messages) if fmt == "markdown" else to_json(conv, messages)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            QMessageBox.warning(self, "Export failed", f"Could not write {path}: {e.strerror or e}")
            return
        self.status.showMessage(f"Exported to {path}", 5000)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not self._sidebar_dragged:
            em = self.fontMetrics().horizontalAdvance("M")
            side = max(em * 10, min(em * 26, self.width() // 5))
            self.splitter.setSizes([side, max(1, self.splitter.width() - side)])

    def _update_title(self) -> None:
        title = self.conversation.title if self.conversation else "New chat"
        self.title_label.setText(title)
        self.title_label.setToolTip(title)
        self.setWindowTitle(f"{title} — Specula")

    # -- asking -------------------------------------------------------------------------------

    def send_message(self, text: str) -> bool:
        """Send text as the user's next message (or as the edited last message) and start the answer."""
        text = text.strip()
        attachments = list(self.composer.attachments)
        if not (text or attachments) or self.busy:
            return False
        if not self.settings.target.path:
            self.chat_view.show_notice(
                "No model is chosen yet.\nSet up the starter models, or pick a model in Settings.",
                actions=[("Settings…", self.open_settings)],
            )
            return False
        editing = self.composer.editing_id
        try:
            if editing is not None and self.conversation is not None:
                self.store.update_content(editing, text)
                self.store.set_attachments(editing, attachments)
                self.store.delete_messages_after(editing)
                self.composer.end_edit()
                self.messages = self.store.messages(self.conversation.id)
                self.chat_view.set_messages(self.messages)
            else:
                if self.conversation is None:
                    title = title_from(text or attachments[0].name)
                    self.conversation = self.store.create_conversation(title, self.new_chat_settings.to_dict())
                    self._update_title()
                message = self.store.add_message(self.conversation.id, "user", text, attachments=attachments)
                self.messages.append(message)
                self.chat_view.add_message(message)
        except STORE_WRITE_ERRORS as e:  # the text stays in the input box
            self.chat_view.show_notice(write_problem(e, "your message"))
            return False
        self.composer.clear()
        self.refresh_sidebar()
        self._answer()
        return True

    def _answer(self, variant_of: int | None = None, replacing: int | None = None) -> Message | None:
        """Answer the conversation on screen; if it chose other models than those loaded, after loading them.

        replacing: the answer a regenerate hid; shown again if no new answer starts.
        """
        if self.models.state == EngineState.LOADING or self._follow_chat_models():
            self._wait_for_models((self.conversation.id, variant_of, replacing))
            return None
        answer = self.answers.ask(self.conversation.id, self.messages, self.effective_settings(), variant_of)
        if answer is None and replacing is not None:
            self.show_variant(replacing, replacing)
        return answer

    def _wait_for_models(self, waiting: tuple[int, int | None, int | None] | None) -> None:
        """An answer waits for its chat's models (None: no longer); the composer offers Stop meanwhile."""
        self._answer_after_load = waiting
        self._show_busy(self.busy)

    def _cancel_waiting(self) -> None:
        """The answer waiting for its models will not be written: a regenerated one comes back."""
        if (waiting := self._answer_after_load) is None:
            return
        self._wait_for_models(None)
        conversation_id, _variant_of, replaced = waiting
        if replaced is not None:
            if self.conversation is not None and self.conversation.id == conversation_id:
                self.show_variant(replaced, replaced)
            else:
                self.store.show_variant(replaced)

    def _show_busy(self, _busy: bool = False) -> None:
        self.composer.set_busy(self.busy)
        self.chat_view.set_busy(self.busy)

    def stop_answer(self) -> None:
        """Stop the answer, or the wait for its models (the models go on loading)."""
        if self._answer_after_load is not None:
            self._cancel_waiting()
        else:
            self.answers.stop()

    def stop_or_cancel(self) -> None:
        if self.busy:
            self.stop_answer()
        elif self.answers.comparing:
            self.answers.stop()
        else:
            self.composer.cancel_edit()

    # -- what the answer controller reports -------------------------------------------------------

    @Slot(object)
    def _on_answer_started(self, message: Message) -> None:
        self.messages.append(message)
        self.chat_view.add_message(message, streaming=True)

    @Slot(object, bool)
    def _on_answer_ended(self, message: Message, shown: bool) -> None:
        if shown:
            self.chat_view.finish_message(message)  # draws the tokens still queued first
        self.context.refresh()
        self.refresh_sidebar()
        if message.finish_reason == FinishReason.CANCELLED.value:
            self.status.showMessage("Stopped.", 3000)

    @Slot(int, object, bool)
    def _show_comparison(self, message_id: int, comparison: dict | None, running: bool) -> None:
        if comparison is not None and (answer := next((m for m in self.messages if m.id == message_id), None)):
            answer.comparison = comparison
        if widget := self.chat_view.message_widget(message_id):
            widget.set_comparison(comparison, running=running)

    # -- regenerate, edit, copy ---------------------------------------------------------------

    def regenerate(self, message_id: int) -> None:
        """Write the last answer again; the one it replaces stays as an alternate (‹ 1/2 ›)."""
        if self.busy or not self.messages or self.messages[-1].id != message_id:
            return
        answer = self.messages[-1]
        try:
            self.store.hide_message(message_id)
        except STORE_WRITE_ERRORS as e:
            self.chat_view.show_notice(write_problem(e, "the answer"))
            return
        self.messages.pop()
        self.chat_view.remove_message(message_id)
        self._answer(variant_of=answer.group, replacing=message_id)

    def show_variant(self, message_id: int, variant_id: int) -> None:
        """Show another alternate of an answer in its place (‹ ›); later messages stay as they are."""
        if self.busy or self.conversation is None:
            return
        try:
            self.store.show_variant(variant_id)
        except STORE_WRITE_ERRORS as e:
            self.chat_view.show_notice(write_problem(e, "your choice of answer"))
            return
        shown = self.store.message(variant_id)
        index = next((i for i, m in enumerate(self.messages) if m.id == message_id), None)
        if shown is None:
            return
        if index is None:  # it was taken off the screen (a regenerate that did not start)
            self.messages.append(shown)
            self.chat_view.add_message(shown)
        else:
            self.messages[index] = shown
            self.chat_view.replace_message(message_id, shown)
        self.context.refresh()

    def regenerate_last(self) -> None:
        if self.messages and self.messages[-1].role == "assistant":
            self.regenerate(self.messages[-1].id)

    def edit_message(self, message_id: int) -> None:
        if self.busy:
            return
        index = next((i for i, m in enumerate(self.messages) if m.id == message_id), None)
        if index is not None and self.messages[index].role == "user":
            message = self.messages[index]
            self.composer.start_edit(
                message_id, message.content, message.attachments, later=len(self.messages) - index - 1
            )

    def edit_last(self) -> None:
        last_user = next((m for m in reversed(self.messages) if m.role == "user"), None)
        if last_user is not None:
            self.edit_message(last_user.id)

    def copy_last_answer(self) -> None:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if last is not None:
            widget = self.chat_view.message_widget(last.id)
            QGuiApplication.clipboard().setText(widget.body.plain_text() if widget else last.content)
            self.status.showMessage("Answer copied.", 2000)

    # -- compare with plain decoding ----------------------------------------------------------

    def compare_with_plain(self, message_id: int) -> None:
        index = next((i for i, m in enumerate(self.messages) if m.id == message_id), None)
        if index is not None:
            self.answers.compare(self.messages[index], self.messages[:index])

    # -- window -------------------------------------------------------------------------------

    def about(self) -> None:
        QMessageBox.about(self, "About Specula", about_html(self.store))

    def _restore_geometry(self) -> None:
        if self.settings.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(self.settings.window_geometry.encode()))
        else:
            em = self.fontMetrics().horizontalAdvance("M")
            self.resize(em * 90, self.fontMetrics().height() * 46)
        if self.settings.splitter_state:
            self.splitter.restoreState(QByteArray.fromBase64(self.settings.splitter_state.encode()))

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop the answer, end the engine thread, and keep what was shown. Safe to call twice."""
        if getattr(self, "_shut", False):
            return
        self._shut = True
        self.models.close()  # a load still running is abandoned, not failed
        close_downloaders(self)  # a running download pauses; its partial file is kept to resume
        self.server.stop()  # its requests are cancelled; it stops taking new ones
        self.host.shutdown()  # bounded: cancels the answer, a load or the starter assembly
        self.background.wait(3000)  # a library read ends by itself; its result goes nowhere
        self.model_picker.tasks.wait(3000)
        self.answers.close()  # the answer that streamed is kept, marked stopped
        self.settings.window_geometry = bytes(self.saveGeometry().toBase64()).decode()
        self.settings.splitter_state = bytes(self.splitter.saveState().toBase64()).decode()
        self.save_settings()


def _starter_available() -> bool:
    from engine.models import starter

    return starter.starter_available()
