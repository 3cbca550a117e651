"""What the local server may do. Private by default: loopback only, caps on what a request may ask.

Listening beyond loopback is an explicit choice (another address than 127.0.0.1 or ::1) and needs
an API key: check() refuses such a config before anything binds, so no owner can start an open
server by mistake. A reverse proxy on the same computer (for TLS) reaches a loopback server, so
the check cannot see it; the key is still what keeps the proxied server closed (see the README).

A web page the user opens must not drive the server, with or without a key: host_rule() says which
Host headers it answers (a page's own name, made to resolve to this computer by DNS rebinding, is
not one of them), and a request from a page of another origin is refused (engine.serving.app).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, replace

from engine.errors import EngineError

DEFAULT_PORT = 8080
LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")  # Host names a server always answers, on any port
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
    # Host names answered besides this server's own (host_rule): a reverse proxy's public name;
    # "*.example.com" its subdomains; "*" any name, which lets DNS rebinding in again.
    allowed_hosts: tuple[str, ...] = ()
    # The document library a request's "specula": {"collections": [...]} reads; "": documents/ in
    # the data folder (engine.paths.documents_dir), as `python -m engine docs` uses.
    documents_dir: str = ""

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

    def host_rule(self) -> HostRule:
        """The Host headers this server answers: loopback's names, the address it listens on (on
        every interface: this computer's name, its .local name and any IP address), allowed_hosts."""
        names = set(LOOPBACK_NAMES)
        if self.every_interface:
            full = socket.gethostname().lower()  # the system's own name: no lookup, no network
            short = full.split(".")[0]
            names |= {full, short, f"{short}.local"} - {"", ".local"}
        else:
            names.add(host_name(self.host))
        patterns = {host_name(p) for p in self.allowed_hosts} - {""}
        return HostRule(
            frozenset(names | {p for p in patterns if not p.startswith("*")}),
            tuple(sorted(p[1:] for p in patterns if p.startswith("*."))),
            any_name="*" in patterns,
            any_address=self.every_interface,
        )

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


@dataclass(frozen=True)
class HostRule:
    """Which Host headers a server answers (any port): names, "*.suffix" patterns, or any.

    DNS rebinding needs a name (the attacker's, made to resolve to this computer), so an IP address
    in the Host can be no such attack: a server on every interface answers any (the address the
    client used, whatever network or NAT it came through), without having to list its interfaces.
    """

    names: frozenset[str]  # lower case, without brackets or port
    suffixes: tuple[str, ...] = ()  # ".example.com" for "*.example.com"
    any_name: bool = False  # "*": a proxy that passes the public name on, or DNS rebinding
    any_address: bool = False

    def allows(self, host_header: str) -> bool:
        name = host_name(host_header)
        if not name:
            return False
        return (
            self.any_name
            or name in self.names
            or name.endswith(self.suffixes)
            or (self.any_address and _is_ip_address(name))
        )


def host_name(host: str) -> str:
    """A Host header's (or an address's) name: lower case, without port, brackets or a final dot.
    "[::1]:8080" -> "::1", "LocalHost.:80" -> "localhost"; a bare IPv6 address stays whole."""
    value = host.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
