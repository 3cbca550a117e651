"""What the local server may do. Private by default: loopback only, caps on what a request may ask."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

DEFAULT_PORT = 8080
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServerConfig:
    host: str = LOOPBACK  # another address is an explicit choice, warned about (exposure_warning)
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

    def exposure_warning(self) -> str:
        """ "" on loopback; otherwise what listening on host means, to print before starting."""
        if self.loopback_only:
            return ""
        where = "every network interface" if self.host in ("0.0.0.0", "::", "") else self.host
        key = (
            "requests need the API key"
            if self.api_key
            else "there is NO API key: anyone who can reach this port can use the model"
        )
        return f"warning: listening on {where}, not only this computer (loopback); {key}."


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
