"""The app's "Local server": the loaded model served to other programs, sharing the app's Engine.

LocalServerController starts and stops engine.serving's server over the app's engine thread: the
server's jobs reach the EngineWorker through EngineHost.dispatch, and while it runs the app's own
answers wait in the same FairQueue (EngineHost.queue), first come first served, so the chat shows
when it waits behind a client. app.dialogs.server_panel is its switch and request log.

Threading: the queue's and the log's listeners are called on the engine thread or the server's
thread; they only emit signals, which Qt delivers on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.core.settings import Settings
from engine.serving.config import DEFAULT_PORT, LOOPBACK, ServerConfig
from engine.serving.request_log import RequestLog

# The server's own modules (uvicorn, Starlette) are imported when it is first switched on: the
# window does not wait for them at start.


class LocalServerController(QObject):
    running_changed = Signal(bool)
    status_changed = Signal(str)  # the status bar's line; "" when the server is off
    request_logged = Signal(object)  # RequestRecord, once finished
    _queue_changed = Signal()  # from any thread

    def __init__(self, host, models, settings: Callable[[], Settings], parent: QObject | None = None):
        """host: the EngineHost; models: the ModelController (what is loaded); settings: the current ones."""
        super().__init__(parent)
        self.host, self.models, self._settings = host, models, settings
        self.server = None  # engine.serving.server.LocalServer while it runs
        self.queue = None  # its FairQueue, which EngineHost.queue is too
        self._queue_changed.connect(self._refresh_status, Qt.ConnectionType.QueuedConnection)
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
        return self.server.service.log if self.server else None

    def start(self, port: int = DEFAULT_PORT, api_key: str | None = None) -> str:
        """Serve on 127.0.0.1:port (0: any free port); the base URL. Raises OSError (the port is taken)."""
        if self.server is not None:
            return self.url
        from engine.serving.fair_queue import FairQueue
        from engine.serving.generation import EngineService
        from engine.serving.server import LocalServer

        config = ServerConfig(host=LOOPBACK, port=port, api_key=api_key or None)
        queue = FairQueue(self.host.dispatch, config.queue_limit)
        log = RequestLog(config.log_size)
        log.add_listener(self.request_logged.emit)
        service = EngineService(lambda: self.host.worker.engine, queue, log)  # read on the engine thread
        defaults, card = self._model(config)
        server = LocalServer(service, config, defaults, card)
        server.start()
        queue.add_listener(self._queue_changed.emit)
        self.server, self.queue = server, queue
        self.host.queue = queue  # the app's answers join the line from now on
        self.running_changed.emit(True)
        self._refresh_status()
        return self.url

    def stop(self) -> None:
        """Stop serving: the server's requests are cancelled; an answer of the app's own goes on."""
        if self.server is None:
            return
        self.host.queue = None
        server, self.server, self.queue = self.server, None, None
        server.stop()
        self.running_changed.emit(False)
        self.status_changed.emit("")

    @Slot()
    def refresh_model(self, *_args) -> None:
        """The model or the settings changed: requests from now on name and sample with the new ones."""
        if self.server is not None:
            self.server.set_model(*self._model(self.server.config))
            self._refresh_status()

    def _model(self, config: ServerConfig) -> tuple:
        """(Defaults, /v1/models card or None) for the loaded model and the current settings."""
        from engine.serving.openai_api import Defaults
        from engine.serving.server import model_card, model_names

        settings, info = self._settings(), self.models.info
        names = model_names(settings.target.path, info.target_name) if info is not None else ()
        sampling = settings.sampling(None)  # a fresh seed per request unless it gives one
        defaults = Defaults(
            sampling=sampling.with_(max_tokens=min(sampling.max_tokens, config.max_tokens_limit)),
            spec=settings.spec(),
            max_tokens_limit=config.max_tokens_limit,
            has_draft=info is not None and info.draft_name is not None,
            model_names=names,
        )
        return defaults, model_card(settings.target.path, names, info) if info is not None else None

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
