"""One Specula per data folder: a second start brings the first one's window forward and ends.

Two apps on one data folder would both write its history index, its downloads' part files, the
settings and what auto learned, each keeping its own picture of them in memory. So the first start
holds a lock file in the data folder (QLockFile: a lock left by an app that crashed or was killed is
taken over, its process being gone) and listens on a local socket named after the folder; a later
start that cannot take the lock asks that socket to show the window, and ends. Another data folder
(SPECULA_HOME) is another Specula, with a lock of its own.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

LOCK_FILE = "specula.lock"
CONNECT_TIMEOUT_MS = 3000  # the first app may be busy starting: its event loop answers once it runs


def server_name(folder: Path) -> str:
    """The local socket of the Specula on folder (a name, not a path: short on every platform)."""
    return "specula-" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]


class SingleInstance(QObject):
    """The claim of this app on its data folder. activated: a later start asked for the window."""

    activated = Signal()

    def __init__(self, folder: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.name = server_name(folder)
        self._lock = QLockFile(str(folder / LOCK_FILE))
        self._lock.setStaleLockTime(0)  # stale only when its process is gone, however old
        self._server: QLocalServer | None = None

    def claim(self) -> bool:
        """True when this is the only Specula on the folder (it then listens for later starts); False
        when another one holds it. A lock that cannot be written at all (a read-only folder) guards
        nothing and stops nothing: True."""
        if not self._lock.tryLock(0):
            if self._lock.error() == QLockFile.LockError.LockFailedError:
                return False
            log.warning("no single-instance lock in this data folder (%s): starting anyway", self._lock.error())
            return True
        self._server = QLocalServer(self)
        QLocalServer.removeServer(self.name)  # a socket left by an app that crashed
        if not self._server.listen(self.name):
            log.warning("a later start cannot reach this window (%s)", self._server.errorString())
        self._server.newConnection.connect(self._on_connection)
        return True

    def ask_the_first_to_show(self) -> bool:
        """From a later start: ask the running app to bring its window forward. False when it does not answer."""
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
            return False
        socket.write(b"show\n")
        socket.waitForBytesWritten(CONNECT_TIMEOUT_MS)
        socket.disconnectFromServer()
        return True

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
        self._lock.unlock()

    def _on_connection(self) -> None:
        while (socket := self._server.nextPendingConnection()) is not None:
            socket.disconnected.connect(socket.deleteLater)
            socket.disconnectFromServer()
            self.activated.emit()
