"""Remote engines' API keys, in the operating system's keyring (the `keyring` library: Secret Service
or KWallet on Linux, the macOS Keychain, Windows Credential Locker), by engine id.

Never in settings.json, logs, exports or a repr. Where no keyring can be used (keyring's "fail"
backend on a headless Linux without Secret Service, a locked or broken keyring: any keyring error),
keys are kept in memory for this session only: `session_only` is then True and `problem` says so in
words for the user. No Qt.
"""

from __future__ import annotations

import logging
import sys

import keyring
import keyring.backends.fail
from keyring.backend import KeyringBackend

from engine.paths import APP_NAME

log = logging.getLogger(__name__)

SERVICE = APP_NAME  # the terminal chat reads MCP secrets under the same name (engine/cli_tools.py)
_KEPT = "the key is kept until Specula closes; you will be asked again next time."


def _platform_keyring() -> str:
    if sys.platform == "darwin":
        return "the macOS Keychain could not be reached"
    if sys.platform == "win32":
        return "Windows Credential Locker could not be reached"
    return "no Secret Service or KWallet answered"


class ApiKeys:
    """get / set / delete an engine's API key. backend: a keyring backend (default: the one keyring
    chooses for this system, or the one set with keyring.set_keyring)."""

    def __init__(self, service: str = SERVICE, backend: KeyringBackend | None = None):
        self.service = service
        self._session_keys: dict[str, str] = {}  # engine id -> key, for this session (always consulted first)
        self.problem = ""
        try:
            self._backend: KeyringBackend | None = backend if backend is not None else keyring.get_keyring()
        except Exception as e:  # noqa: BLE001 - any keyring failure means: keys for this session only
            self._give_up(e)
        else:
            if isinstance(self._backend, keyring.backends.fail.Keyring):
                self._backend = None
                self.problem = f"No system keyring was found ({_platform_keyring()}): {_KEPT}"
                log.info("no system keyring: API keys are kept for this session only")

    @property
    def session_only(self) -> bool:
        """True when keys live in memory only, until the app closes (problem says why)."""
        return self._backend is None

    def __repr__(self) -> str:
        where = "session only" if self.session_only else type(self._backend).__name__
        return f"ApiKeys({self.service!r}, {where}, {len(self._session_keys)} held this session)"

    def get(self, engine_id: str) -> str | None:
        """The key for engine_id; None when there is none."""
        if engine_id in self._session_keys:
            return self._session_keys[engine_id]
        if self._backend is None:
            return None
        try:
            return self._backend.get_password(self.service, engine_id) or None
        except Exception as e:  # noqa: BLE001
            self._give_up(e)
            return None

    def set(self, engine_id: str, key: str) -> None:
        """Keep key for engine_id (in the keyring when there is one); an empty key deletes it."""
        key = key.strip()
        if not key:
            self.delete(engine_id)
            return
        if self._backend is not None:
            try:
                self._backend.set_password(self.service, engine_id, key)
            except Exception as e:  # noqa: BLE001
                self._give_up(e, key)
            else:
                self._session_keys.pop(engine_id, None)
                return
        self._session_keys[engine_id] = key

    def delete(self, engine_id: str) -> None:
        """Forget engine_id's key (nothing happens when it has none)."""
        self._session_keys.pop(engine_id, None)
        if self._backend is None:
            return
        try:
            if self._backend.get_password(self.service, engine_id) is not None:
                self._backend.delete_password(self.service, engine_id)
        except Exception as e:  # noqa: BLE001
            self._give_up(e)

    def _give_up(self, error: Exception, key: str = "") -> None:
        """From now on keys live in memory only; problem says why (never with the key in it)."""
        self._backend = None
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if key:
            reason = reason.replace(key, "…")
        reason = reason if len(reason) <= 160 else reason[:159] + "…"
        self.problem = f"The system keyring could not be used ({reason}): {_KEPT}"
        log.warning("system keyring failed; API keys are kept for this session only (%s)", reason)
