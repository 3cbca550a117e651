"""The app's "Local server": the loaded model served to other programs, sharing the app's Engine.

LocalServerController starts and stops engine.serving's server (assembled as `python -m engine
serve` assembles it) over the app's engine thread: the server's requests join the line the app's
own answers wait in (EngineHost.queue), first come first served, so the chat shows when it waits
behind a client. What it serves follows the loaded model and the current settings.
app.dialogs.server_panel is its switch and request log.

Threading: the queue's and the log's listeners are called on the engine thread or the server's
thread; they only emit signals, which Qt delivers on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.bridge.host import EngineHostApi
from app.bridge.model_controller import ModelController
from app.core.settings import Settings
from engine.serving.config import DEFAULT_PORT, LOOPBACK, ServerConfig
from engine.serving.fair_queue import FairQueue
from engine.serving.request_log import RequestLog

if TYPE_CHECKING:
    from engine.serving.served_model import ServedModel

# The server's own modules (uvicorn, Starlette) are imported when it is first switched on: the
# window does not wait for them at start.


class LocalServerController(QObject):
    running_changed = Signal(bool)
    status_changed = Signal(str)  # the status bar's line; "" when the server is off
    request_logged = Signal(object)  # RequestRecord, once finished
    _queue_changed = Signal()  # from any thread

    def __init__(
        self,
        host: EngineHostApi,
        models: ModelController,
        settings: Callable[[], Settings],
        parent: QObject | None = None,
    ):
        """host: the EngineHost; models: the ModelController (what is loaded); settings: the current ones."""
        super().__init__(parent)
        self.host, self.models, self._settings = host, models, settings
        self.server = None  # engine.serving.server.LocalServer while it runs
        self._queue_changed.connect(self._refresh_status, Qt.ConnectionType.QueuedConnection)
        self._on_queue_change = self._queue_changed.emit  # the listener, kept to be removed
        models.ready.connect(self.refresh_model)
        models.load_failed.connect(self.refresh_model)

    @property
    def running(self) -> bool:
        return self.server is not None

    @property
    def url(self) -> str:
        return self.server.base_url if self.server else ""

    @property
    def log(self) -> RequestLog | None:
        return self.server.log if self.server else None

    @property
    def queue(self) -> FairQueue | None:
        """The line it shares with the app's answers (EngineHost.queue), while it runs."""
        return self.host.queue if self.server else None

    def start(self, port: int = DEFAULT_PORT, api_key: str | None = None) -> str:
        """Serve on 127.0.0.1:port (0: any free port); the base URL. Raises OSError (the port is taken)."""
        if self.server is not None:
            return self.url
        from engine.serving.server import LocalServer

        config = ServerConfig(host=LOOPBACK, port=port, api_key=api_key or None)
        # The engine is read on the engine thread, as each request's turn comes (the model may change).
        server = LocalServer(lambda: self.host.worker.engine, self.host.queue, config, self._model())
        server.log.add_listener(self.request_logged.emit)
        server.start()
        self.host.queue.add_listener(self._on_queue_change)
        self.server = server
        self.running_changed.emit(True)
        self._refresh_status()
        return self.url

    def stop(self) -> None:
        """Stop serving: the server's requests are cancelled; an answer of the app's own goes on."""
        if self.server is None:
            return
        self.host.queue.remove_listener(self._on_queue_change)
        server, self.server = self.server, None
        server.stop()
        self.running_changed.emit(False)
        self.status_changed.emit("")

    @Slot()
    def refresh_model(self, *_args) -> None:
        """The model or the settings changed: requests from now on name and sample with the new ones."""
        if self.server is not None:
            self.server.set_model(self._model())
            self._refresh_status()

    def _model(self) -> ServedModel | None:
        """The loaded model as served, with the current settings' sampling and speculation; None
        while none is loaded."""
        from engine.serving.served_model import ServedModel

        settings, info = self._settings(), self.models.info
        if info is None:
            return None
        # A fresh seed per request unless it gives one.
        return ServedModel(settings.target.path, info, settings.sampling(None), settings.spec())

    def waiting_app_answer(self) -> int | None:
        """How many jobs run or wait before the app's own answer, while it waits; None otherwise."""
        queue = self.queue
        if queue is None:
            return None
        mine = [t for t in queue.waiting() if t.owner is None and t.label == "app"]
        return queue.ahead_of(mine[0]) if mine else None

    def status_text(self) -> str:
        if self.server is None:
            return ""
        ahead = self.waiting_app_answer()
        if ahead:
            return f"Your answer waits its turn: {ahead} request{'s' if ahead > 1 else ''} of the local server first"
        queue = self.queue
        busy = (1 if queue.running is not None else 0) + queue.n_waiting
        return f"Local server {self.url}" + (f" · {busy} request{'s' if busy > 1 else ''}" if busy else "")

    @Slot()
    def _refresh_status(self) -> None:
        self.status_changed.emit(self.status_text())
