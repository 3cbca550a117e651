"""The server on a thread of its own: uvicorn serving the app on a socket bound here.

Binding the socket here (not in uvicorn) gives port 0 a real port to report before the first
request, and keeps the server's start and stop in its owner's hands: `python -m engine serve`,
the app's "Local server" switch, the tests and the load script all start and stop it alike.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvicorn

from engine import SamplingParams, SpecParams
from engine.serving.app import Api, build_app
from engine.serving.config import ServerConfig
from engine.serving.fair_queue import EngineThread, FairQueue
from engine.serving.generation import EngineService
from engine.serving.openai_api import Defaults
from engine.serving.request_log import RequestLog

if TYPE_CHECKING:  # the name only: importing Engine loads llama.cpp
    from engine import Engine

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
GRACEFUL_STOP_S = 2  # open streams get this long to end after their answers were cancelled


def model_names(path: str, target_name: str, model_id: str = "") -> tuple[str, ...]:
    """The names a request may use for the loaded model; the first is the id /v1/models lists:
    model_id if set, else the file's name without .gguf; the file name and the model's own name also do."""
    file_name = os.path.basename(path)
    stem = file_name[: -len(".gguf")] if file_name.lower().endswith(".gguf") else file_name
    names = [model_id or stem, stem, file_name, target_name]
    return tuple(dict.fromkeys(n for n in names if n))


def model_card(path: str, names: tuple[str, ...], info) -> dict:
    """/v1/models' entry for the loaded model; info: its EngineInfo."""
    try:
        created = int(os.path.getmtime(path))
    except OSError:
        created = 0
    return {
        "id": names[0],
        "object": "model",
        "created": created,
        "owned_by": "specula",
        "meta": {"name": info.target_name, "draft": info.draft_name, "n_ctx": info.n_ctx, "backend": info.backend},
    }


class LocalServer:
    """uvicorn on its own thread and event loop; start() returns once it accepts connections."""

    def __init__(self, service: EngineService, config: ServerConfig, defaults: Defaults, card: dict | None):
        self.service, self.config = service, config
        self.api = Api(service, config, defaults, card)
        self._app = build_app(self.api)
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0
        self.error: BaseException | None = None

    def set_model(self, defaults: Defaults, card: dict | None) -> None:
        """Another model was loaded (or none: card None): requests from now on name and use it."""
        self.api.defaults, self.api.model_card = defaults, card

    @property
    def base_url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> str:
        """Bind, start serving, and return the base URL (…/v1). Raises OSError (port taken…)."""
        self._socket = bind(self.config.host, self.config.port)
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            log_config=None,  # leave the host program's logging alone
            log_level="warning",
            access_log=False,  # the RequestLog says what each request did
            lifespan="off",
            http="h11",  # pure Python, whatever else is installed (httptools would be picked by "auto")
            ws="none",  # no WebSocket endpoints
            timeout_graceful_shutdown=GRACEFUL_STOP_S,
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="specula-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"The server did not start: {self.error or 'it stopped at once'}")
            time.sleep(0.02)
        return self.base_url

    def _serve(self) -> None:
        try:
            asyncio.run(self._uvicorn.serve(sockets=[self._socket]))
        except BaseException as e:  # noqa: BLE001 - reported by start() and stop()
            self.error = e
            log.exception("the server stopped with an error")

    def stop(self, timeout: float = 10.0) -> bool:
        """Cancel every answer (running and waiting), close the connections, end the thread."""
        if self._thread is None:
            return True
        self.service.cancel_all()
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._uvicorn.force_exit = True
            self._thread.join(2.0)
        if self._socket is not None:
            self._socket.close()
        return not self._thread.is_alive()


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: any free one), ready for uvicorn to listen on."""
    host = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if host not in ("", "0.0.0.0", "::") and not _is_address(host):
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        host = address[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.set_inheritable(False)
    except OSError:
        sock.close()
        raise
    return sock


def _is_address(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


@dataclass
class HeadlessServer:
    """An Engine served on its own: the engine's thread, the queue, the log, the HTTP server."""

    engine: Engine
    server: LocalServer
    service: EngineService
    engine_thread: EngineThread
    model_id: str

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def log(self) -> RequestLog:
        return self.service.log

    def close(self) -> bool:
        """Stop serving and end the engine's thread (the Engine itself stays the caller's to close)."""
        stopped = self.server.stop()
        return self.engine_thread.close() and stopped


def serve_engine(
    engine: Engine,
    config: ServerConfig,
    sampling: SamplingParams | None = None,
    spec: SpecParams | None = None,
) -> HeadlessServer:
    """Serve a loaded engine; from now on only the engine's new thread may use it. Raises OSError."""
    path, info = engine.target.spec.path, engine.info
    names = model_names(path, info.target_name, config.model_id)
    defaults = Defaults(
        sampling=sampling or SamplingParams(max_tokens=config.max_tokens_limit),
        spec=spec or SpecParams(),
        max_tokens_limit=config.max_tokens_limit,
        has_draft=engine.draft is not None,
        model_names=names,
    )
    engine_thread = EngineThread()
    service = EngineService(
        lambda: engine, FairQueue(engine_thread.dispatch, config.queue_limit), RequestLog(config.log_size)
    )
    server = LocalServer(service, config, defaults, model_card(path, names, info))
    try:
        server.start()
    except BaseException:
        engine_thread.close()
        raise
    return HeadlessServer(engine, server, service, engine_thread, names[0])
