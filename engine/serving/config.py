"""What the local server may do. Private by default: loopback only, caps on what a request may ask.

Listening beyond loopback is an explicit choice (another address than 127.0.0.1 or ::1) and needs
an API key: check() refuses such a config before anything binds, so no owner can start an open
server by mistake. A reverse proxy on the same computer (for TLS) reaches a loopback server, so
the check cannot see it; the key is still what keeps the proxied server closed (see the README).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from engine.errors import EngineError

DEFAULT_PORT = 8080
LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = ("0.0.0.0", "::", "")  # IPv4's wildcard; IPv6's (most systems: IPv4 too); "" as 0.0.0.0


class OpenServerRefused(EngineError):
    """A server would listen beyond this computer with no API key: anyone who reached it could use the model."""

    hint = "Set an API key; clients then send it as 'Authorization: Bearer KEY'."


@dataclass(frozen=True)
class ServerConfig:
    host: str = LOOPBACK  # another address is an explicit choice: it needs an API key (check)
    port: int = DEFAULT_PORT  # 0: any free port (the server says which)
    api_key: str | None = None  # when set, every /v1 request needs "Authorization: Bearer <key>"
    cors_origins: tuple[str, ...] = ()  # browsers' cross-origin requests: none allowed unless listed
    max_body_bytes: int = 4 << 20  # a larger request body is answered 413
    max_tokens_limit: int = 4096  # a larger max_tokens is answered 400; also the default when absent
    queue_limit: int = 16  # requests waiting for the engine (the running one not counted); more: 429
    model_id: str = ""  # the name /v1/models lists; "" = the target file's name without .gguf
    log_size: int = 200  # requests kept in the request log

    def with_(self, **changes) -> ServerConfig:
        return replace(self, **changes)

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.host)

    @property
    def every_interface(self) -> bool:
        return self.host in EVERY_INTERFACE

    @property
    def has_key(self) -> bool:
        """A key that is only blanks counts as none: no client could send it."""
        return bool((self.api_key or "").strip())

    def where(self) -> str:
        return "every network interface" if self.every_interface else self.host

    def check(self) -> None:
        """Raise OpenServerRefused when host reaches beyond loopback and there is no API key.

        A host name other than localhost counts as beyond loopback (it may resolve anywhere)."""
        if not self.loopback_only and not self.has_key:
            raise OpenServerRefused(
                f"Not starting: listening on {self.where()} reaches beyond this computer, and there is "
                "no API key, so anyone who can reach the port could use the model."
            )

    def exposure_warning(self) -> str:
        """ "" on loopback; otherwise what listening on host means, to print before starting."""
        if self.loopback_only:
            return ""
        key = (
            "requests need the API key"
            if self.has_key
            else "there is NO API key: anyone who can reach this port can use the model"
        )
        return (
            f"warning: listening on {self.where()}, not only this computer (loopback); {key}. "
            "Plain HTTP: the key and the chats cross the network unencrypted (TLS: a reverse proxy, see the README)."
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
