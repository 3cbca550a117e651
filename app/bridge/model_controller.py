"""The models as the app sees them: which state the engine is in, what is loaded, and getting models.

The session asks it to load; it tells the engine thread (through the EngineHost), keeps the load
guard's record (a model that failed is not reloaded unasked), and says when the engine is ready
or failed. Getting a model to chat with also goes through here: a library file (with its best
compatible draft, found off the GUI thread), a file added from disk, the starter pair assembled
on the engine thread; each ends in `chosen`, which the session turns into this chat's models.
The window only shows it (status bar, notices); answers read `info` and `target_step_s` from here.
"""

from __future__ import annotations

import logging
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.bridge.host import EngineHostApi
from app.bridge.hub_tasks import BackgroundTasks
from app.core.load_guard import LoadGuard
from app.core.settings import Settings
from engine.errors import user_message

log = logging.getLogger(__name__)


class EngineState(str, Enum):
    """Where the engine is. A str Enum, so it prints (and compares) as its name."""

    NONE = "none"  # nothing asked yet
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"  # the last load failed: no model is loaded


class ModelController(QObject):
    ready = Signal(object)  # EngineInfo: the models loaded (state is READY already)
    load_failed = Signal(str)  # message for the user (state is FAILED already)
    unloaded = Signal()  # the user ejected the target: nothing is loaded (state is NONE already)
    load_started = Signal(str)  # the target's path (state is LOADING already)
    chosen = Signal(str, str)  # target and draft paths ("" for none) the user got: chat with them
    starter_progress = Signal(int, int)  # parts assembled, of
    starter_finished = Signal()  # the starter pair is on disk; `chosen` follows
    starter_failed = Signal(str)

    def __init__(self, host: EngineHostApi, load_guard: LoadGuard, parent: QObject | None = None, library=None):
        """host: the EngineHost, or a fake that satisfies the same Protocol (tests).
        library: the ModelLibrary (None: the data folder's, made when first used)."""
        super().__init__(parent)
        self.host = host
        self._library = library
        self.load_guard = load_guard
        self.state = EngineState.NONE
        self.info = None  # EngineInfo of the loaded models
        self.loaded_key: tuple | None = None  # Settings.load_key() of the last load asked
        self.target_step_s = 0.0  # one plain decoding step of the target, as the load measured it
        self._target_path = ""
        self.loaded_paths: tuple[str, str] = ("", "")  # the target and draft files of the last load asked
        self.background = BackgroundTasks(self, max_threads=1)  # library reads, off the GUI thread
        self._closed = False
        w = host.worker
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.starter_progress.connect(self.starter_progress)
        w.starter_finished.connect(self._on_starter_finished)
        w.starter_failed.connect(self.starter_failed)

    @property
    def library(self):
        if self._library is None:
            from engine.models.library import ModelLibrary

            self._library = ModelLibrary()
        return self._library

    def user_name(self, path: str) -> str:
        """The name the user gave a model in the library ("" for none)."""
        return self.library.user_name(path)

    def load(self, settings: Settings) -> bool:
        """Load the models the settings choose; False (nothing asked) when no target is chosen."""
        target, draft = settings.target_spec(), settings.draft_spec()
        if target is None:
            return False
        self.state = EngineState.LOADING
        self.loaded_key = settings.load_key()
        self._target_path = target.path
        self.loaded_paths = (target.path, draft.path if draft is not None else "")
        self.load_guard.begin(target.path)
        target = target.with_(name=self.user_name(target.path))
        draft = draft.with_(name=self.user_name(draft.path)) if draft is not None else None
        self.host.load(target, draft, settings.chat_template())
        self.load_started.emit(target.path)
        return True

    def loaded_models(self) -> dict[str, str]:
        """path -> "target" / "draft" for the models in memory now (the picker's Eject, the library's badge)."""
        info, (target, draft) = self.info, self.loaded_paths
        if info is None or self.state != EngineState.READY:
            return {}
        loaded = {target: "target"}
        if info.draft_name is not None and draft:
            loaded[draft] = "draft"
        return loaded

    # -- getting models ---------------------------------------------------------------------------

    def use_model(self, entry) -> None:
        """Chat with a library entry as the target, with its best compatible draft (if any): `chosen`.

        Finding the draft reads vocabularies (a while for 150k-token ones): on a pool thread.
        """
        library = self.library

        def found(drafts: list) -> None:
            if not self._closed:
                self.chosen.emit(str(entry.path), str(drafts[0].path) if drafts else "")

        def failed(message: str) -> None:
            log.warning("no draft chosen: %s", message)
            found([])

        self.background.start(lambda _report: library.compatible_drafts(entry), found, failed)

    def add_file(self, path: str) -> str:
        """Add a GGUF file to the library and use it; "" or why it could not be added."""
        try:
            entry = self.library.add_file(path)
        except Exception as e:  # noqa: BLE001 - every failure becomes a message
            return user_message(e)
        self.use_model(entry)
        return ""

    def entry(self, path: str):
        """The library's entry for a model file, or None."""
        return next((e for e in self.library.scan() if str(e.path) == path), None) if path else None

    def assemble_starter(self) -> None:
        """Put the starter pair together on the engine thread: `starter_progress`, then `chosen` or `starter_failed`."""
        self.host.assemble_starter()

    def unload(self) -> None:
        """Eject: free both models (on the engine thread, after what is queued there)."""
        worker = self.host.worker
        self.state, self.info, self.loaded_key = EngineState.NONE, None, None
        self.loaded_paths = ("", "")
        self.host.dispatch(worker.close_engine)
        self.unloaded.emit()

    def unload_draft(self) -> None:
        """Free the draft model and keep the target; `ready` follows with the new EngineInfo."""
        worker = self.host.worker
        self.loaded_paths = (self.loaded_paths[0], "")

        def drop() -> None:  # on the engine thread
            if worker.engine is not None and worker.engine.draft is not None:
                worker.engine.drop_draft()
                worker.loaded.emit(worker.engine.info)

        self.host.dispatch(drop)

    def model_names(self, settings: Settings) -> tuple[str | None, str | None]:
        """The target's and the draft's names, as stored with each answer."""
        if self.info is not None:
            return self.info.target_name, self.info.draft_name
        # Not loaded (yet): file names, rather than reading headers on the GUI thread.
        draft = settings.draft.path
        return Path(settings.target.path).stem, Path(draft).stem if draft else None

    def close(self) -> None:
        """The app is closing: a load still running is abandoned, not failed; a library read's result goes nowhere."""
        self._closed = True
        if self.state == EngineState.LOADING:
            self.load_guard.abandoned()

    def wait(self, msecs: int) -> None:
        """After the engine thread ended: let a library read end by itself."""
        self.background.wait(msecs)

    @Slot(object)
    def _on_loaded(self, info) -> None:
        self.info = info
        self.state = EngineState.READY
        self.load_guard.succeeded()
        self.target_step_s = info.calibration.step_s
        self.ready.emit(info)

    @Slot(str, str)
    def _on_starter_finished(self, target: str, draft: str) -> None:
        self.starter_finished.emit()
        self.chosen.emit(target, draft)

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.state = EngineState.FAILED
        self.load_guard.failed(self._target_path, message)
        self.info = None
        self.load_failed.emit(message)
