"""The server on a thread of its own: uvicorn serving the app on a socket bound here.

Every owner assembles it the same way, LocalServer(engine, queue, config, model): the request
log, the service over the engine thread's line, and the API with what served_model derives from
the model. `python -m engine serve` (serve_engine, over an EngineThread of its own), the app's
"Local server" switch (over the app's engine thread), the tests and the load script differ only
in the engine thread they pass. Binding the socket here (not in uvicorn) gives port 0 a real port
to report before the first request, and keeps start and stop in the owner's hands.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvicorn

from engine import SamplingParams, SpecParams
from engine.serving.app import Api, build_app
from engine.serving.config import ServerConfig
from engine.serving.documents import Documents
from engine.serving.fair_queue import EngineThread, FairQueue
from engine.serving.generation import EngineService
from engine.serving.request_log import RequestLog
from engine.serving.served_model import ServedModel, serving_terms

if TYPE_CHECKING:  # the name only: importing Engine loads llama.cpp
    from engine import Engine

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
GRACEFUL_STOP_S = 2  # open streams get this long to end after their answers were cancelled


class LocalServer:
    """One engine served over HTTP: the one assembly for `python -m engine serve` and the app.

    uvicorn runs on its own thread and event loop; each request becomes a job in the engine
    thread's line, recorded in the request log. start() returns once it accepts connections.
    """

    def __init__(
        self,
        engine: Callable[[], Engine | None],
        queue: FairQueue,
        config: ServerConfig,
        model: ServedModel | None,
    ):
        """engine: the engine to use, read when a job runs on its thread (None: no model loaded).
        queue: that thread's line; its owner's own jobs may wait in it too (the app's answers, which
        are never refused), so its waiting limit becomes config's. model: what is loaded, or None."""
        queue.limit = config.queue_limit
        documents = Documents(config.documents_dir or None)
        self.service = EngineService(engine, queue, RequestLog(config.log_size), documents)
        self.config = config
        self.api = Api(self.service, config, *serving_terms(config, model))
        self._app = build_app(self.api)
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0
        self.error: BaseException | None = None

    @property
    def log(self) -> RequestLog:
        return self.service.log

    def set_model(self, model: ServedModel | None) -> None:
        """Another model was loaded, other defaults chosen, or none is loaded: requests from now on follow."""
        self.api.defaults, self.api.model_card = serving_terms(self.config, model)

    @property
    def base_url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> str:
        """Bind, start serving, and return the base URL (…/v1).

        Raises OpenServerRefused before binding when the host reaches beyond loopback with no API
        key (ServerConfig.check), OSError when binding fails (the port is taken…)."""
        self.config.check()
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
        self.service.documents.close()
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
    """An Engine served on its own: the engine's thread and the server over it."""

    engine: Engine
    server: LocalServer
    engine_thread: EngineThread

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def service(self) -> EngineService:
        return self.server.service

    @property
    def log(self) -> RequestLog:
        return self.server.log

    @property
    def model_id(self) -> str:
        return self.server.api.defaults.model_names[0]

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
    """Serve a loaded engine; from now on only the engine's new thread may use it.

    Raises OpenServerRefused (beyond loopback without an API key) or OSError, as LocalServer.start.

    sampling, spec: how requests are answered unless they say otherwise (see ServedModel).
    """
    engine_thread = EngineThread()
    model = ServedModel(engine.target.spec.path, engine.info, sampling, spec)
    server = LocalServer(lambda: engine, FairQueue(engine_thread.dispatch), config, model)
    try:
        server.start()
    except BaseException:
        engine_thread.close()
        raise
    return HeadlessServer(engine, server, engine_thread)
