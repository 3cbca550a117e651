"""What the models tell the user: the status bar's model line and progress, and the notices of a load.

ModelStatus listens to ModelController, the engine thread's load signals and the draft watch, and
draws on the status bar, the chat view and the welcome panel. It decides nothing: what is loaded
is ModelController's, which chat uses which models is ChatSession's.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Slot

from app.bridge.draft_offer import IDLE_ANSWERS
from app.bridge.model_controller import ModelController

STARTER_STAGE = "Setting up the starter models"


class ModelStatus(QObject):
    def __init__(self, models: ModelController, window):
        """window: the MainWindow: its status bar, chat view and welcome panel; show_chat, load_models,
        open_settings, its settings; the session, whose draft an idle-draft notice unloads."""
        super().__init__(window)
        self.models, self.window = models, window
        self.chat_format = None  # ChatFormatInfo of the loaded model
        worker = models.host.worker
        models.load_started.connect(self._on_load_started)
        models.ready.connect(self._on_loaded)
        models.load_failed.connect(self._on_load_failed)
        models.unloaded.connect(self._on_unloaded)
        models.starter_progress.connect(self._on_starter_progress)
        models.starter_finished.connect(lambda: window.status.set_progress(None))
        models.starter_failed.connect(self._on_starter_failed)
        worker.load_progress.connect(self._on_load_progress)
        worker.chat_format_known.connect(self._on_chat_format)
        worker.draft_refused.connect(self._on_draft_refused)
        window.draft_watch.idle.connect(self._offer_draft_unload)

    def _notice(self, text: str, kind: str = "error", actions=None):
        return self.window.chat_view.show_notice(text, kind=kind, actions=actions)

    def _settings_action(self) -> list:
        return [("Settings…", self.window.open_settings)]

    def ask_before_loading(self, path: str, problem: str) -> None:
        """The target failed (or took the app down) last time: offer to try again rather than load it."""
        self.window.show_chat()
        self.window.status.models.setText("Model not loaded")
        self._notice(
            f"{Path(path).name} was not loaded automatically: {problem}",
            actions=[("Try again", self.window.load_models), *self._settings_action()],
        )

    def starting_starter(self) -> None:
        self.window.welcome.starter_button.setEnabled(False)
        self.window.welcome.set_progress(0, 1)
        self.window.status.set_progress(STARTER_STAGE, 0.0)

    @Slot(str)
    def _on_load_started(self, target_path: str) -> None:
        status = self.window.status
        self.window.show_chat()
        self.window.chat_view.clear_notices()
        status.set_engine(None)
        status.models.setText(f"Loading {Path(target_path).name}…")
        status.set_progress("Loading target", 0.0)

    @Slot(str, float)
    def _on_load_progress(self, stage: str, fraction: float) -> None:
        if stage == "Ready":
            self.window.status.set_progress(None)
        else:
            self.window.status.set_progress(stage, fraction)

    @Slot(object)
    def _on_loaded(self, info) -> None:
        status = self.window.status
        status.set_progress(None)
        status.set_engine(info)
        status.showMessage(f"Ready: {info.target_name}", 4000)

    @Slot()
    def _on_unloaded(self) -> None:
        self.window.status.set_engine(None)
        self.window.status.models.setText("No model loaded: choose one above")

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        status = self.window.status
        status.set_progress(None)
        status.set_engine(None)
        status.models.setText("Model not loaded")
        self.window.show_chat()
        self._notice("The model could not be loaded. " + message, actions=self._settings_action())

    @Slot(str)
    def _on_draft_refused(self, message: str) -> None:
        self._notice(message + "\nSpecula continues with the target alone.", "info", self._settings_action())

    @Slot(object)
    def _on_chat_format(self, chat_format) -> None:
        """A base model's file has no chat format: say once per file what Specula uses instead."""
        self.chat_format = chat_format
        settings = self.window.settings
        path = settings.target.path
        if not chat_format.base_model or chat_format.source == "override" or path in settings.base_model_notices:
            return
        name = self.models.info.target_name if self.models.info else Path(path).stem
        if chat_format.source == "family":
            text = f"{name} is a base model — no chat format in its file. Specula uses {chat_format.description}."
        else:
            text = (
                f"{name} is a base model — no chat format: its file has none and its family is not known, so "
                "Specula uses ChatML, which it may not follow. Settings → Chat format can set another."
            )
        self._notice(text, "info", self._settings_action())
        settings.base_model_notices.append(path)
        self.window.save_settings()

    @Slot(object)
    def _offer_draft_unload(self, info) -> None:
        freed = f" and free {info.draft_memory_bytes / 1e9:.1f} GB" if info.draft_memory_bytes else ""

        def unload() -> None:
            notice.hide()
            self.window.session.eject("draft")

        notice = self._notice(
            f"Auto has not drafted with {info.draft_name} in the last {IDLE_ANSWERS} answers: on this machine "
            f"plain decoding and prompt lookup do better. Unload the draft model{freed}?",
            "info",
            [("Unload draft model", unload)],
        )

    @Slot(int, int)
    def _on_starter_progress(self, done: int, total: int) -> None:
        self.window.welcome.set_progress(done, total)
        self.window.status.set_progress(STARTER_STAGE, done / max(total, 1))

    @Slot(str)
    def _on_starter_failed(self, message: str) -> None:
        self.window.status.set_progress(None)
        self.window.welcome.starter_failed(message)
