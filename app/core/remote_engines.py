"""Remote engines the user added: another computer's OpenAI-compatible server, by name and address.

A chat chooses a remote model by a reference in place of a file path, "remote:<engine id>/<model
id>", so the settings, a chat's own settings and the picker carry it like any model choice. The
engine's API key is never here: it lives in the system keyring (app.core.api_keys), by engine id.
No Qt.
"""

from __future__ import annotations

import ipaddress
import socket
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

REMOTE_PREFIX = "remote:"


@dataclass(frozen=True)
class RemoteEngine:
    name: str  # the user's name for it ("GPU box")
    base_url: str  # as the user wrote it: http://host:port/v1
    id: str = field(default_factory=lambda: uuid.uuid4().hex)  # stable: chats and the keyring refer to it

    @property
    def host(self) -> str:
        """The host name or address, for "remote · host" labels."""
        return urlsplit(self.base_url.strip()).hostname or self.base_url


def address_problem(base_url: str) -> str:
    """ "" for an address Specula can send requests to (http or https, with a host); otherwise what is wrong."""
    url = base_url.strip()
    if not url:
        return "Write the server's address, e.g. http://192.168.1.20:8080/v1."
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        ok = False
    if not ok:
        return f"{url!r} is not a server address: write it as http://host:port/v1, e.g. http://192.168.1.20:8080/v1."
    return ""


def engine_from_dict(data: object) -> RemoteEngine:
    """A RemoteEngine from its settings.json entry; ValueError says what is wrong with it."""
    if not isinstance(data, dict):
        raise ValueError(f"{data!r} is not a remote engine entry")
    values = {key: data.get(key) for key in ("name", "base_url", "id")}
    for key, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"its {key} {value!r} is not a text")
    if problem := address_problem(values["base_url"]):
        raise ValueError(problem)
    return RemoteEngine(values["name"].strip(), values["base_url"].strip(), values["id"].strip())


def remote_ref(engine_id: str, model: str) -> str:
    """What a chat's target holds for model on the remote engine engine_id."""
    return f"{REMOTE_PREFIX}{engine_id}/{model}"


def parse_remote_ref(path: str) -> tuple[str, str] | None:
    """(engine id, model id) of a remote reference; None for a file path."""
    if not path.startswith(REMOTE_PREFIX):
        return None
    engine_id, slash, model = path[len(REMOTE_PREFIX) :].partition("/")
    return (engine_id, model) if engine_id and slash and model else None


def is_remote(path: str) -> bool:
    return parse_remote_ref(path) is not None


def address_warning(base_url: str, resolve=socket.getaddrinfo) -> str:
    """ "" for an address on this computer or a network of its own (loopback, RFC 1918, link-local,
    IPv6 unique-local, the shared 100.64/10 that Tailscale uses); otherwise why sending chats there deserves a second thought. A host name
    is judged by what it resolves to now (resolve: socket.getaddrinfo's signature, for tests)."""
    host = urlsplit(base_url.strip()).hostname
    if not host:
        return ""
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in resolve(host, None)}
        except (OSError, ValueError):
            return f"{host} could not be looked up now, so Specula cannot tell whether it is on your own network."
    if not any(a.is_global for a in addresses):  # loopback, private, link-local, CGNAT (Tailscale)…
        return ""
    scheme = urlsplit(base_url.strip()).scheme
    plain = " over plain HTTP, readable on the way" if scheme == "http" else ""
    return (
        f"{host} is not on this computer or a private network: your chats will be sent there{plain}. "
        "Add it only if you trust that server and the way to it."
    )
