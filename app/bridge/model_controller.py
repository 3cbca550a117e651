"""The loaded model's lifecycle as the app sees it: which state the engine is in, what is loaded.

The window asks it to load; it tells the engine thread (through the EngineHost), keeps the load
guard's record (a model that failed is not reloaded unasked), and says when the engine is ready
or failed. The window only shows it (status bar, notices); answers read `info` and
`target_step_s` from here.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.core.load_guard import LoadGuard
from app.core.settings import Settings


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

    def __init__(self, host, load_guard: LoadGuard, parent: QObject | None = None, user_names=None):
        """host: the EngineHost, or a fake with the same `load` and worker signals (tests).
        user_names: path -> the user's name for that model ("" for none), e.g. ModelLibrary.user_name."""
        super().__init__(parent)
        self.host = host
        self.user_names = user_names or (lambda _path: "")
        self.load_guard = load_guard
        self.state = EngineState.NONE
        self.info = None  # EngineInfo of the loaded models
        self.loaded_key: tuple | None = None  # Settings.load_key() of the last load asked
        self.target_step_s = 0.0  # one plain decoding step of the target, as the load measured it
        self._target_path = ""
        self.loaded_paths: tuple[str, str] = ("", "")  # the target and draft files of the last load asked
        host.worker.loaded.connect(self._on_loaded)
        host.worker.load_failed.connect(self._on_load_failed)

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
        target = target.with_(name=self.user_names(target.path))
        draft = draft.with_(name=self.user_names(draft.path)) if draft is not None else None
        self.host.load(target, draft, settings.chat_template())
        return True

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
        """The app is closing: a load still running is abandoned, not failed."""
        if self.state == EngineState.LOADING:
            self.load_guard.abandoned()

    @Slot(object)
    def _on_loaded(self, info) -> None:
        self.info = info
        self.state = EngineState.READY
        self.load_guard.succeeded()
        self.target_step_s = info.calibration.step_s
        self.ready.emit(info)

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.state = EngineState.FAILED
        self.load_guard.failed(self._target_path, message)
        self.info = None
        self.load_failed.emit(message)
