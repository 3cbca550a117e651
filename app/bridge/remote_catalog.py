"""What the remote engines the user added offer: their models, asked off the GUI thread.

RemoteCatalog asks each engine's `GET /models` on a pool thread (engine.remote.list_models) when
the engines change and when asked again, and keeps the newest answer per engine: its models, or
why they could not be listed. Nothing is asked while no engine is configured: the app then never
touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.bridge.hub_tasks import BackgroundTasks
from app.core.remote_engines import RemoteEngine, remote_ref

LIST_TIMEOUT_S = 5.0  # an engine that does not answer this soon is listed as unreachable, for now


@dataclass(frozen=True)
class RemoteChoice:
    """A remote engine's model, as the model picker offers it."""

    ref: str  # what a chat's target holds (app.core.remote_engines.remote_ref)
    model: str
    engine: RemoteEngine
    context_size: int | None = None

    @property
    def title(self) -> str:
        return self.model

    @property
    def label(self) -> str:
        return f"{self.model} · remote · {self.engine.host}"

    @property
    def tooltip(self) -> str:
        context = f"\ncontext {self.context_size:,} tokens" if self.context_size else ""
        return f"{self.model}\non {self.engine.name} ({self.engine.base_url}): answers are computed there{context}"


class RemoteCatalog(QObject):
    changed = Signal()  # choices or problems changed

    def __init__(self, api_key, parent: QObject | None = None):
        """api_key: engine id -> its API key or None (app.core.api_keys.ApiKeys.get)."""
        super().__init__(parent)
        self._api_key = api_key
        self.tasks = BackgroundTasks(self, max_threads=2)
        self.engines: list[RemoteEngine] = []
        self.models: dict[str, list] = {}  # engine id -> [RemoteModel], once listed
        self.problems: dict[str, str] = {}  # engine id -> why its models could not be listed

    def set_engines(self, engines: list[RemoteEngine]) -> None:
        """The engines in the settings now: those new or changed are asked, those removed forgotten."""
        known = {e.id: e for e in self.engines}
        self.engines = list(engines)
        ids = {e.id for e in engines}
        for gone in [i for i in self.models if i not in ids] + [i for i in self.problems if i not in ids]:
            self.models.pop(gone, None)
            self.problems.pop(gone, None)
        for engine in engines:
            if known.get(engine.id) != engine:
                self.refresh(engine)
        self.changed.emit()

    def refresh(self, engine: RemoteEngine | None = None) -> None:
        """Ask one engine (None: all) for its models again."""
        for e in [engine] if engine is not None else self.engines:
            self._ask(e)

    def choices(self) -> list[RemoteChoice]:
        return [
            RemoteChoice(remote_ref(e.id, m.id), m.id, e, m.context_size)
            for e in self.engines
            for m in self.models.get(e.id, [])
        ]

    def _ask(self, engine: RemoteEngine) -> None:
        from engine.remote import list_models

        key = self._api_key(engine.id)

        def listed(models: list) -> None:
            self.models[engine.id] = models
            self.problems.pop(engine.id, None)
            self.changed.emit()

        def failed(message: str) -> None:
            self.problems[engine.id] = message
            self.changed.emit()

        self.tasks.start(
            lambda _report: list_models(
                engine.base_url, key, connect_timeout_s=LIST_TIMEOUT_S, read_timeout_s=LIST_TIMEOUT_S
            ),
            listed,
            failed,
        )

    def wait(self, msecs: int) -> None:
        self.tasks.wait(msecs)
