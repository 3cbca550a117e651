"""The main window: builds the widgets and wires them to the chat session and the controllers.

The window draws; it decides nothing about conversations or models. ChatSession (app.session)
owns the open conversation and every change to it; ModelController what is loaded and getting
models; AnswerController the answer running; LocalServerController the local server. The window
never waits on the engine: requests go out through those objects, and what they report comes
back as signals the window renders (status bar, chat view, notices).
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QByteArray, QTimer, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.bridge.answer_controller import AnswerController
from app.bridge.context_counter import ContextCounter
from app.bridge.documents_service import DocumentsService
from app.bridge.draft_offer import DraftIdleWatch
from app.bridge.local_server import LocalServerController
from app.bridge.mcp_service import McpService
from app.bridge.model_controller import EngineState, ModelController
from app.bridge.remote_catalog import RemoteCatalog
from app.bridge.worker import REMOTE_PASSAGE_CHARS, EngineHost
from app.chat.chat_header import ChatHeader
from app.chat.chat_view import ChatView
from app.chat.composer import Composer
from app.chat.documents_button import RemoteTarget
from app.chat.sidebar import Sidebar
from app.core.api_keys import ApiKeys
from app.core.chat_settings import ChatSettings
from app.core.export import export_file_name, write_export
from app.core.load_guard import LoadGuard
from app.core.remote_engines import parse_remote_ref
from app.core.settings import Settings
from app.core.store import Conversation, Role, Store
from app.dialogs.chat_settings_dialog import ChatSettingsDialog
from app.dialogs.documents_dialog import DocumentsDialog
from app.dialogs.downloads import close_downloaders, open_downloader, open_library
from app.dialogs.mcp_servers_dialog import McpServersDialog
from app.dialogs.remote_engines_dialog import RemoteEnginesDialog
from app.dialogs.remote_passages import RemotePassagesDialog
from app.dialogs.server_panel import ServerPanel, ServerStatusLabel
from app.dialogs.settings_dialog import SettingsDialog
from app.dialogs.tool_approval_dialog import ToolApprovals
from app.dialogs.welcome import WelcomePanel
from app.session.chat_session import ChatSession
from app.ui import file_dialogs, theme
from app.ui.about import about_html
from app.ui.appearance import Appearance, stepped
from app.ui.menus import build_menus
from app.ui.model_status import ModelStatus
from app.ui.status_bar import StatusBar
from engine import FinishReason


class MainWindow(QMainWindow):
    mcp_servers_changed = Signal()  # mcp.json was saved from the MCP servers dialog: servers may differ

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
        self.auto_setup = auto_setup
        self.host = EngineHost(self)  # the history index in the data folder (engine.paths.history_dir())
        # Chats deleted before this start were purged by the store just now: their tokens go from the
        # history index too (also the safety net for a forget that a closing engine thread never ran).
        for conversation_id in self.store.purged:
            self.host.forget_history(conversation_id)
        # A model that failed is not reloaded unasked: the guard's record sits beside the settings.
        self.models = ModelController(self.host, LoadGuard.beside(settings_path), self, library=library)
        self.draft_watch = DraftIdleWatch(self.host.worker, self)
        # Remote engines' API keys: the system keyring, or this session's memory where there is none.
        self.api_keys = ApiKeys()
        self.mcp = McpService(self.api_keys, parent=self)  # MCP servers start when a chat first needs them
        self.answers = AnswerController(self.host, self.store, self.models, self, api_keys=self.api_keys, mcp=self.mcp)
        self.approvals = ToolApprovals(self.answers, self.mcp, self)  # every tool call is asked first
        self.remote_catalog = RemoteCatalog(self.api_keys.get, self)
        self.session = ChatSession(
            self.store, self.host, self.models, self.answers, lambda: self.settings, self.save_settings, self
        )
        self.server = LocalServerController(self.host, self.models, lambda: self.settings, self)
        self.server_panel: ServerPanel | None = None
        self.documents = DocumentsService(parent=self)
        self.documents_dialog: DocumentsDialog | None = None
        self.remote_passages_dialog: RemotePassagesDialog | None = None  # open while it asks (tests click it)
        self._shut = False

        self.setWindowTitle("Specula")
        self.setWindowIcon(theme.icon())
        self._build()
        self.menus = build_menus(self)
        self._connect()
        self.remote_catalog.set_engines(self.settings.remote_engines)  # none added: nothing is asked
        self.header.colours_button.setChecked(self.settings.show_token_colours)
        self.refresh_sidebar()
        self._restore_geometry()
        QTimer.singleShot(0, self, self.start)

    # -- construction -------------------------------------------------------------------------

    def _build(self) -> None:
        self.sidebar = Sidebar()
        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        self.header = ChatHeader(lambda: self.models.library)
        column.addWidget(self.header)
        self.chat_view = ChatView()
        self.chat_view.show_reasoning = self.settings.show_reasoning
        column.addWidget(self.chat_view, 1)
        self.composer = Composer()
        self.chat_settings_button = self.composer.chat_settings_button  # by the input: what this chat sends
        column.addWidget(self.composer)
        self.context = ContextCounter(
            self.host,
            self.composer.meter,
            self._context_source,
            lambda: (self.composer.text(), self.composer.attachments, self.composer.editing_id),
            self,
            remote=self._remote_host,
            collections=lambda: self.session.chat_settings.collections,
            tools=lambda: tuple(t.spec for t in self.mcp.tools(self.session.chat_settings.mcp_servers)),
        )
        self.welcome = WelcomePanel(starter_available=_starter_available())

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
        self.appearance = Appearance(QApplication.instance())
        self.appearance.apply(self.settings.theme, self.settings.text_scale)
        self._show_title("New chat")
        self._update_chat_button()
        self._update_documents_button()
        self._update_tools_button()

    def _connect(self) -> None:
        """The widgets to the session and the controllers, and what those report back to the widgets."""
        s, sidebar, view, composer = self.session, self.sidebar, self.chat_view, self.composer
        sidebar.conversation_selected.connect(s.open_conversation)
        sidebar.new_requested.connect(s.new_conversation)
        sidebar.rename_requested.connect(s.rename_conversation)
        sidebar.delete_requested.connect(s.delete_conversation)
        sidebar.undo_requested.connect(s.undo_delete)
        sidebar.pin_requested.connect(s.pin_conversation)
        sidebar.export_requested.connect(self.export_conversation)
        sidebar.search_changed.connect(lambda _text: self.refresh_sidebar())
        view.edit_requested.connect(self.edit_message)
        view.regenerate_requested.connect(s.regenerate)
        view.compare_requested.connect(s.compare_with_plain)
        view.variant_requested.connect(s.show_variant)
        composer.send_requested.connect(self.send_message)
        composer.stop_requested.connect(s.stop)
        composer.edit_last_requested.connect(self.edit_last)
        composer.draft_changed.connect(self.context.refresh)
        self.chat_settings_button.clicked.connect(self.open_chat_settings)
        header = self.header
        header.colours_button.toggled.connect(self.set_token_colours)
        header.settings_button.clicked.connect(self.open_settings)
        header.model_picker.target_chosen.connect(self.models.use_model)
        header.model_picker.draft_chosen.connect(lambda entry: s.use_draft(str(entry.path) if entry else ""))
        header.model_picker.eject_requested.connect(s.eject)
        header.model_picker.remote_chosen.connect(s.use_remote)
        header.model_picker.add_remote_requested.connect(self.open_remote_engines)
        self.composer.documents_button.collections_chosen.connect(self.choose_collections)
        self.composer.documents_button.manage_documents.connect(self.open_documents)
        self.composer.documents_button.remote_sending_chosen.connect(self.choose_remote_passages)
        self.documents.summaries_ready.connect(self._update_documents_button)
        self.documents.failed.connect(self._on_documents_failed)
        self.composer.folders_dropped.connect(self.add_dropped_folders)
        self.composer.tools_button.servers_chosen.connect(self.choose_tool_servers)
        self.composer.tools_button.manage_servers.connect(self.open_mcp_servers)
        self.mcp_servers_changed.connect(self._update_tools_button)  # servers added, renamed or removed
        self.mcp.server_failed.connect(self._update_tools_button)
        for settled in (self.mcp.server_started, self.mcp.server_failed):  # its tools are in the prompt, or gone
            settled.connect(self.context.refresh)
        self.documents.other_model_downloaded.connect(self._on_model_downloaded)
        self.documents.embedding_model_downloaded.connect(self._on_embedding_model_downloaded)
        self.remote_catalog.changed.connect(lambda: header.model_picker.set_remote(self.remote_catalog.choices()))
        self.welcome.starter_requested.connect(self.assemble_starter)
        self.welcome.download_requested.connect(self.open_downloader)
        self.welcome.add_file_requested.connect(self.add_model_file)

        s.conversation_changed.connect(self._on_conversation_changed)
        s.title_changed.connect(self._show_title)
        s.messages_reset.connect(view.set_messages)
        s.message_added.connect(lambda message, streaming: view.add_message(message, streaming=streaming))
        s.message_replaced.connect(view.replace_message)
        s.message_removed.connect(view.remove_message)
        s.answer_ended.connect(self._on_answer_ended)
        s.comparison_changed.connect(self._show_comparison)
        s.chat_settings_changed.connect(self._update_chat_button)
        s.chat_settings_changed.connect(self._update_documents_button)
        s.chat_settings_changed.connect(self._update_tools_button)
        s.models_chosen.connect(self._update_picker)
        s.busy_changed.connect(composer.set_busy)
        s.busy_changed.connect(view.set_busy)
        s.conversations_changed.connect(self.refresh_sidebar)
        s.conversation_deleted.connect(sidebar.show_undo)
        s.notice.connect(lambda text, kind: view.show_notice(text, kind=kind))
        s.model_needed.connect(self._say_no_model)
        for changed in (s.messages_reset, s.message_replaced, s.chat_settings_changed):
            changed.connect(self.context.refresh)

        a = self.answers
        a.tokens_arrived.connect(view.queue_tokens)
        a.reasoning_arrived.connect(view.queue_reasoning)
        a.live_stats.connect(view.set_live_stats)
        a.sources_arrived.connect(view.set_sources)
        a.tool_uses_changed.connect(view.set_tool_uses)
        a.tool_allowed.connect(self._allow_tool)
        a.notice.connect(view.show_notice)
        a.status_message.connect(lambda text: self.status.showMessage(text, 6000))

        self.model_status = ModelStatus(self.models, self)
        for changed in (self.models.load_started, self.models.ready, self.models.unloaded):
            changed.connect(self._update_picker)
        self.models.ready.connect(self._update_tools_button)  # whether the model's template has tools

    def _remote_host(self) -> str:
        """The host of the remote engine answering the chat on screen ("" for this computer)."""
        engine = self._remote_engine()
        return engine.host if engine else ""

    def _remote_engine(self):
        """The remote engine (app.core.remote_engines.RemoteEngine) answering the chat on screen, or None."""
        ref = parse_remote_ref(self.session.effective_settings().target.path)
        return self.settings.remote_engine(ref[0]) if ref else None

    def _context_source(self) -> tuple:
        """What the context meter counts: the messages, the system prompt and the answer's token budget."""
        s = self.session.effective_settings()
        return self.session.messages, s.system_prompt, s.max_tokens

    # -- startup and models -------------------------------------------------------------------

    @Slot()
    def start(self) -> None:
        """Load the configured models; on a first start, find the starter pair or welcome the user.
        The document collections catch up with their folders and are watched from now on."""
        self.documents.keep_up_to_date()
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
                self.model_status.ask_before_loading(s.target.path, problem)
            return
        if s.target.path:
            self.welcome.set_note(f"The model file {s.target.path} is gone. Choose another model.", error=True)
        elif s.model_choice_lost:
            self.welcome.set_note("Your settings could not be read, so no model is chosen. Choose one.", error=True)
        self.show_welcome()
        if self.auto_setup and not s.target.path and not s.model_choice_lost and _starter_available():
            self.assemble_starter()

    def show_welcome(self) -> None:
        self.pages.setCurrentWidget(self.welcome)

    def show_chat(self) -> None:
        self.pages.setCurrentWidget(self.chat_page)

    def show_chat_if_ready(self) -> None:
        if self.pages.currentWidget() is self.welcome and self.models.state != EngineState.NONE:
            self.show_chat()

    def load_models(self) -> None:
        """Load the models the conversation on screen uses (its own, or the app's); none chosen: welcome."""
        if not self.session.load_models():
            self.show_welcome()

    def _update_picker(self, *_args) -> None:
        s = self.session.effective_settings()
        self.header.model_picker.set_models(s.target.path, s.draft.path, self.models.loaded_models())

    # -- getting models -------------------------------------------------------------------------

    def assemble_starter(self) -> None:
        self.model_status.starting_starter()
        self.models.assemble_starter()

    def add_model_file(self, path: str) -> bool:
        """Add a GGUF file to the library and chat with it (with the best compatible draft, if any)."""
        if problem := self.models.add_file(path):
            self.welcome.set_note(problem, error=True)
            if self.pages.currentWidget() is self.chat_page:
                self.chat_view.show_notice(problem)
            return False
        return True

    def add_model_dialog(self) -> None:
        path = file_dialogs.open_file(self, "Add a GGUF model", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_model_file(path)

    def open_library(self) -> None:
        target = self.models.entry(self.settings.target.path)
        open_library(self, self.models.library, target, self.models.use_model, loaded=self.models.loaded_models())

    def open_downloader(self, embedding_models: bool = False) -> None:
        """The downloader; embedding_models: opened on them (from the Documents window)."""
        dialog = open_downloader(self, self.models.library, self.models.entry(self.settings.target.path))
        dialog.model_downloaded.connect(lambda path: self.documents.consider_download(str(path)))
        if embedding_models:
            dialog.suggest_embedding_models()

    def _on_embedding_model_downloaded(self, path: str, adopted: bool) -> None:
        name = Path(path).name
        if adopted:
            self.status.showMessage(f"Downloaded {name}: your documents are now searched by meaning too.", 10000)
        else:
            self.status.showMessage(f"Downloaded {name}, an embedding model: choose it in File → Documents….", 10000)

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
        title = self.session.conversation.title if self.session.conversation else "New chat"
        dialog = ChatSettingsDialog(self.session.chat_settings, self.settings, title, self)
        if dialog.exec():
            self.apply_chat_settings(dialog.result_chat(), dialog.presets)

    def apply_chat_settings(self, chat: ChatSettings, presets: dict[str, str]) -> None:
        if presets != self.settings.presets:
            self.settings.presets = presets
            self.save_settings()
        self.session.set_chat_settings(chat)

    def open_documents(self) -> None:
        if self.documents_dialog is None:
            self.documents_dialog = DocumentsDialog(self.documents, self)
            self.documents_dialog.download_embedding_model.connect(lambda: self.open_downloader(embedding_models=True))
        else:
            self.documents.refresh()
        self.documents_dialog.show()
        self.documents_dialog.raise_()

    @Slot(str)
    def _on_documents_failed(self, why: str) -> None:
        """Work on the documents failed in the background (an index found damaged and rebuilt at launch, a
        full disk while a watched folder changed): said in the chat, unless the Documents window says it."""
        if self.documents_dialog is None or not self.documents_dialog.isVisible():
            self.chat_view.show_notice(f"Your documents: {why}", actions=[("Documents…", self.open_documents)])

    def add_dropped_folders(self, folders: list[str]) -> None:
        """Folders dropped on the chat: each a collection of the documents (one that holds it already, or a
        new one named after it), chosen for this chat and indexed in the background."""
        names = self.documents.add_folders(folders)
        chosen = self.session.chat_settings.collections
        self.choose_collections([*chosen, *(n for n in dict.fromkeys(names) if n not in chosen)])
        quoted = ", ".join(f"“{n}”" for n in dict.fromkeys(names))
        said = f"This chat now answers from your documents in {quoted}; new files are indexed in the background."
        if (engine := self._remote_engine()) is not None and engine.id not in self.session.chat_settings.documents_to:
            said += f" {engine.name} gets no passages until you allow it in the Documents menu."
        self.chat_view.show_notice(
            said,
            kind="info",
            actions=[("Documents…", self.open_documents)],
        )

    def choose_collections(self, names: list[str]) -> None:
        chat = self.session.chat_settings
        chat.collections = list(names)
        self.session.set_chat_settings(chat)

    def _update_documents_button(self, *_args) -> None:
        chat, engine = self.session.chat_settings, self._remote_engine()
        remote = RemoteTarget(engine.name, engine.host, engine.id in chat.documents_to) if engine else None
        self.composer.documents_button.set_collections(self.documents.names(), chat.collections, remote)

    def choose_remote_passages(self, send: bool) -> None:
        """The Documents menu's "Send passages to <engine>": confirmed first (remote_passages_dialog)."""
        if (engine := self._remote_engine()) is None:
            return
        if not send:
            self._send_passages_to(engine.id, False)
            return
        collections = self.session.chat_settings.collections
        dialog = RemotePassagesDialog(engine.name, engine.host, collections, REMOTE_PASSAGE_CHARS, self)
        dialog.decided.connect(lambda allowed: self._send_passages_to(engine.id, allowed))
        self.remote_passages_dialog = dialog
        dialog.open()

    def _send_passages_to(self, engine_id: str, allowed: bool) -> None:
        self.remote_passages_dialog = None
        chat = self.session.chat_settings
        chat.documents_to = [e for e in chat.documents_to if e != engine_id] + ([engine_id] if allowed else [])
        self.session.set_chat_settings(chat)  # the button follows, unticked again after a No

    def choose_tool_servers(self, names: list[str]) -> None:
        chat = self.session.chat_settings
        chat.mcp_servers = list(names)
        self.session.set_chat_settings(chat)
        # Started now, not at the first answer: one that fails says so on the Tools button at once, and the
        # context meter counts the descriptions of their tools.
        self.mcp.ensure(names)

    def _update_tools_button(self, *_args) -> None:
        names = self.mcp.server_names()
        failed = {name: why for name in names if (why := self.mcp.failure(name))}
        native = self.models.info.tools_native if self.models.info else True
        self.composer.tools_button.set_servers(names, self.session.chat_settings.mcp_servers, failed, native)

    def _allow_tool(self, conversation_id: int, key: str) -> None:
        """'Always allow' was chosen for a call of that chat: remembered with the chat."""
        conversation = self.session.conversation
        if conversation is not None and conversation.id == conversation_id:
            chat = self.session.chat_settings
            chat.allowed_tools = [*chat.allowed_tools, key]
            self.session.set_chat_settings(chat)
        elif (stored := self.store.conversation(conversation_id)) is not None:
            chat = ChatSettings.from_dict(stored.settings)
            chat.allowed_tools = [*chat.allowed_tools, key]
            self.store.set_chat_settings(conversation_id, chat.to_dict())

    def _update_chat_button(self) -> None:
        lines = self.session.chat_settings.summary(self.settings.presets)
        self.chat_settings_button.setText("This chat ●" if lines else "This chat")
        self.chat_settings_button.setToolTip(
            "This chat's system prompt, preset and sampling (Ctrl+Shift+,)"
            + ("<br><br>" + "<br>".join(html.escape(line) for line in lines) if lines else "<br>It follows Settings.")
        )

    def open_settings(self) -> None:
        dialog = SettingsDialog(
            self.settings,
            self.models.library,
            parent=self,
            erase_history=lambda: self.host.forget_history(None),
            api_keys=self.api_keys,
        )
        dialog.download_requested.connect(self.open_downloader)
        if dialog.exec():
            self.apply_settings(dialog.result_settings())

    def open_remote_engines(self) -> None:
        """Settings' Remote engines dialog, on its own (from the chat header's model list)."""
        dialog = RemoteEnginesDialog(self.settings.remote_engines, self.api_keys, self)
        if dialog.exec():
            self.settings.remote_engines = dialog.engines()
            self.save_settings()
            self.remote_catalog.set_engines(self.settings.remote_engines)

    def open_mcp_servers(self) -> None:
        """Settings → MCP servers… (and the chat's Manage MCP servers…)."""
        dialog = McpServersDialog(self.api_keys, self)
        dialog.servers_changed.connect(self.mcp_servers_changed)
        dialog.exec()

    def apply_settings(self, new: Settings) -> None:
        previous, self.settings = self.settings, new
        self.save_settings()
        self.session.follow_settings(previous)
        self.remote_catalog.set_engines(new.remote_engines)
        self.server.refresh_model()  # the server's defaults follow the settings
        self.chat_view.set_show_reasoning(new.show_reasoning)

    def save_settings(self) -> None:
        try:
            self.settings.save(self.settings_path)
        except OSError as e:
            self.status.showMessage(f"Could not save the settings: {e}", 8000)

    # -- appearance ---------------------------------------------------------------------------

    def step_text(self, steps: int) -> None:
        """Larger (1), smaller (-1) or the system's size (0), remembered."""
        self.set_appearance(text_scale=stepped(self.settings.text_scale, steps))

    def set_appearance(self, theme_name: str | None = None, text_scale: float | None = None) -> None:
        theme_name = theme_name or self.settings.theme
        text_scale = self.settings.text_scale if text_scale is None else text_scale
        if (theme_name, text_scale) == (self.settings.theme, self.settings.text_scale):
            return
        self.settings.theme, self.settings.text_scale = theme_name, text_scale
        self.menus.themes[theme_name].setChecked(True)
        self.appearance.apply(theme_name, text_scale)
        self.save_settings()
        self.session.reload_messages()  # message widgets size their fonts when built: build them again

    def set_token_colours(self, on: bool) -> None:
        self.settings.show_token_colours = on
        self.chat_view.set_colours(on)
        self.save_settings()

    # -- conversations ------------------------------------------------------------------------

    def refresh_sidebar(self) -> None:
        conversations = self.store.conversations(self.sidebar.search.text())
        current = self.session.conversation
        self.sidebar.set_conversations(conversations, current.id if current else None)

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation | None) -> None:
        self._show_title(conversation.title if conversation else "New chat")
        self.composer.cancel_edit()
        if conversation is None:
            self.sidebar.list.setCurrentRow(-1)
        self._update_picker()
        # A chat's tool servers start as it opens, as when they are ticked: a failure shows on the Tools
        # button before the user asks, and the context meter counts their tools.
        self.mcp.ensure(self.session.chat_settings.mcp_servers)
        self.show_chat_if_ready()
        self.composer.input.setFocus()

    @Slot(str)
    def _show_title(self, title: str) -> None:
        self.header.set_title(title)
        self.setWindowTitle(f"{title} — Specula")

    def export_conversation(self, conversation_id: int | None, fmt: str) -> None:
        conv = self.store.conversation(conversation_id) if conversation_id else self.session.conversation
        if conv is None:
            self.status.showMessage("Open a conversation to export it.", 4000)
            return
        name, kind = export_file_name(conv, fmt)
        path, _ = QFileDialog.getSaveFileName(self, "Export conversation", str(Path.home() / name), kind)
        if path:
            self.write_export(conv, fmt, Path(path))

    def write_export(self, conv: Conversation, fmt: str, path: Path) -> None:
        try:
            write_export(self.store, conv, fmt, path)
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

    # -- asking, editing, copying -------------------------------------------------------------

    def send_message(self, text: str) -> bool:
        """Send the text with the composer's attachments (in place of the message being edited, if any)."""
        if not self.session.send_message(text, list(self.composer.attachments), self.composer.editing_id):
            return False
        self.composer.end_edit()
        self.composer.clear()
        return True

    def _say_no_model(self) -> None:
        self.chat_view.show_notice(
            "No model is chosen yet.\nSet up the starter models, or pick a model in Settings.",
            actions=[("Settings…", self.open_settings)],
        )

    def stop_or_cancel(self) -> None:
        """Esc: stop the answer (or the wait for its models), else a comparison, else the edit."""
        if self.session.busy:
            self.session.stop()
        elif self.answers.comparing:
            self.answers.stop()
        else:
            self.composer.cancel_edit()

    @Slot(object, bool)
    def _on_answer_ended(self, message, shown: bool) -> None:
        if shown:
            self.chat_view.finish_message(message)  # draws the tokens still queued first
        self.context.refresh()
        if message.finish_reason == FinishReason.CANCELLED:
            self.status.showMessage("Stopped.", 3000)

    @Slot(int, object, bool)
    def _show_comparison(self, message_id: int, comparison: dict | None, running: bool) -> None:
        if widget := self.chat_view.message_widget(message_id):
            widget.set_comparison(comparison, running=running)

    def edit_message(self, message_id: int) -> None:
        if self.session.busy or (found := self.session.message(message_id)) is None:
            return
        index, message = found
        if message.role == Role.USER:
            later = len(self.session.messages) - index - 1
            self.composer.start_edit(message_id, message.content, message.attachments, later=later)

    def edit_last(self) -> None:
        if (last_user := self.session.last(Role.USER)) is not None:
            self.edit_message(last_user.id)

    def copy_last_answer(self) -> None:
        if (last := self.session.last(Role.ASSISTANT)) is not None:
            widget = self.chat_view.message_widget(last.id)
            QGuiApplication.clipboard().setText(widget.body.plain_text() if widget else last.content)
            self.status.showMessage("Answer copied.", 2000)

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

    def bring_forward(self) -> None:
        """Another start of Specula on this data folder asked for this window (app/single_instance.py)."""
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop the answer, end the engine thread, and keep what was shown. Safe to call twice."""
        if self._shut:
            return
        self._shut = True
        self.models.close()  # a load still running is abandoned, not failed
        close_downloaders(self)  # a running download pauses; its partial file is kept to resume
        self.server.stop()  # its requests are cancelled; it stops taking new ones
        self.documents.shutdown(3.0)  # indexing stops between files; what it stored is kept
        self.host.shutdown()  # bounded: cancels the answer, a load or the starter assembly
        self.mcp.close()  # bounded: stops the MCP servers started (none: nothing to do)
        self.models.wait(3000)  # a library read ends by itself; its result goes nowhere
        self.header.model_picker.tasks.wait(3000)
        self.remote_catalog.wait(3000)  # a model list asked of a remote engine ends within its timeout
        self.answers.close()  # the answer that streamed is kept, marked stopped
        self.settings.window_geometry = bytes(self.saveGeometry().toBase64()).decode()
        self.settings.splitter_state = bytes(self.splitter.saveState().toBase64()).decode()
        self.save_settings()


def _starter_available() -> bool:
    from engine.models import starter

    return starter.starter_available()
