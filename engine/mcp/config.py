"""MCP servers in the `mcpServers` notation of LM Studio, Claude Desktop and Cursor (mcp.json), read and written.

    {"mcpServers": {"files": {"command": "npx", "args": [...], "env": {...}},
                    "search": {"url": "https://...", "headers": {...}, "allowNetwork": true}}}

Each server is checked on its own: a bad entry is reported by name (McpConfig.problems) and kept as it
was when the file is written back, while the others stay usable. Keys Specula does not use are kept too.

"timeout": how long one call to the server's tools may take, in seconds (Cline's key; 60 without it).

Specula's own additions, which other apps ignore:
- "allowNetwork": an HTTP server is network, so each one is used only once the user has said so;
  an imported or hand-written entry without it is not connected.
- Secrets: env and header values are the user's secrets (tokens, API keys). The app keeps them in the
  system keyring; the file then holds a reference, "${keyring:ID}" (see move_secrets_out), and the host
  is handed the values by ID when it starts the server (resolve_secrets). The engine never reads the
  keyring itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.json_file import write_json
from engine.mcp.errors import McpConfigError
from engine.paths import mcp_config_file

SERVERS_KEY = "mcpServers"
NETWORK_KEY = "allowNetwork"
TIMEOUT_KEY = "timeout"
DEFAULT_TIMEOUT_S = 60  # one tool call, when the server's entry sets none (Cline's default too)
MAX_TIMEOUT_S = 24 * 3600
_KNOWN_KEYS = {"command", "args", "env", "cwd", "url", "headers", NETWORK_KEY, TIMEOUT_KEY}
# "type" as Cursor and VS Code write it. An HTTP server speaks streamable HTTP, or the older SSE transport
# (MCP 2024-11-05, deprecated but still served by many): "type": "sse", or a url ending in /sse.
_STDIO_TYPES = {"stdio"}
_HTTP_TYPES = {"http", "streamable-http", "streamableHttp", "streamable_http"}
_SSE_TYPE = "sse"
_SECRET = re.compile(r"^\$\{keyring:([^}]+)\}$")


def secret_ref(secret_id: str) -> str:
    """The value written in place of a secret kept in the keyring under secret_id."""
    return "${keyring:" + secret_id + "}"


def secret_id_of(value: str) -> str | None:
    """The keyring ID a value refers to, or None when the value is written out."""
    found = _SECRET.match(value)
    return found.group(1) if found else None


@dataclass(frozen=True)
class ServerConfig:
    """One server: a command to run (stdio) or a url (streamable HTTP or SSE). env and headers may hold
    "${keyring:ID}" references in place of values. extra: the entry's other keys, kept when written."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    allow_network: bool = False
    timeout_s: float | None = None  # one tool call's limit; None: the app's default
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_http(self) -> bool:
        return bool(self.url)

    @property
    def is_sse(self) -> bool:
        """An HTTP server of the older SSE transport: its "type" says "sse", or it has none and its url's
        path ends in /sse (where the SDKs serve it; streamable HTTP is at /mcp)."""
        kind = self.extra.get("type")
        if not self.url or (kind is not None and kind != _SSE_TYPE):
            return False
        return kind == _SSE_TYPE or urlsplit(self.url).path.rstrip("/").endswith("/sse")

    def secret_ids(self) -> list[str]:
        """The keyring IDs this server's env and headers refer to (what the app must look up to start it)."""
        values = [*self.env.values(), *self.headers.values()]
        return [ref for ref in map(secret_id_of, values) if ref is not None]

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = dict(self.extra)
        if self.url:
            entry["url"] = self.url
            if self.headers:
                entry["headers"] = dict(self.headers)
            entry[NETWORK_KEY] = self.allow_network
        else:
            entry["command"] = self.command
            entry["args"] = list(self.args)
            if self.env:
                entry["env"] = dict(self.env)
            if self.cwd:
                entry["cwd"] = self.cwd
        if self.timeout_s is not None:
            entry[TIMEOUT_KEY] = int(self.timeout_s) if float(self.timeout_s).is_integer() else self.timeout_s
        return entry

    def same_server(self, other: ServerConfig) -> bool:
        """True when both run the same thing with the same settings (names aside): an import that is already here."""
        return (self.command, self.args, dict(self.env), self.cwd, self.url, dict(self.headers)) == (
            other.command,
            other.args,
            dict(other.env),
            other.cwd,
            other.url,
            dict(other.headers),
        )


@dataclass
class McpConfig:
    """The servers of one mcp.json, in the file's order. problems: server name -> what is wrong with its
    entry (those are not in servers; invalid keeps their entries as written). error: the whole file could
    not be read (bad JSON, not an object): servers is then empty."""

    servers: dict[str, ServerConfig] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # the file's other top-level keys (Claude Desktop has several)

    def to_json(self) -> dict[str, Any]:
        servers = {name: server.to_json() for name, server in self.servers.items()}
        servers.update({name: entry for name, entry in self.invalid.items() if name not in servers})
        return {**self.extra, SERVERS_KEY: servers}


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} must be an object whose values are strings")
    return dict(value)


def parse_server(name: str, entry: Any) -> ServerConfig:
    """One entry of mcpServers; ValueError says what is wrong with it, in words."""
    if not name.strip():
        raise ValueError("a server needs a name")
    if not isinstance(entry, dict):
        raise ValueError("the entry must be an object with a command or a url")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        raise ValueError(
            "it has both a command and a url: keep one (a command runs a program, a url reaches an HTTP server)"
        )
    if not has_command and not has_url:
        raise ValueError("it has neither a command (a program to run) nor a url (an HTTP server)")
    kind = entry.get("type")
    if kind is not None and kind not in (_STDIO_TYPES if has_command else {*_HTTP_TYPES, _SSE_TYPE}):
        raise ValueError(f"its type {kind!r} does not match its {'command' if has_command else 'url'}")
    network = entry.get(NETWORK_KEY, False)
    if not isinstance(network, bool):
        raise ValueError(f"{NETWORK_KEY} must be true or false")
    timeout = entry.get(TIMEOUT_KEY)
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S
    ):
        raise ValueError(f"{TIMEOUT_KEY} must be a number of seconds, more than 0 and at most {MAX_TIMEOUT_S}")
    extra = {key: value for key, value in entry.items() if key not in _KNOWN_KEYS}
    if has_url:
        url = entry["url"]
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("url must be an http:// or https:// address")
        for key in ("args", "env", "cwd"):
            if key in entry:
                raise ValueError(f"{key} belongs to a command, not to a url")
        headers = _strings(entry.get("headers", {}), "headers")
        return ServerConfig(name, url=url, headers=headers, allow_network=network, timeout_s=timeout, extra=extra)
    command = entry["command"]
    if not isinstance(command, str) or not command.strip():
        raise ValueError("command must be a non-empty string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("args must be a list of strings")
    if "headers" in entry:
        raise ValueError("headers belong to a url, not to a command")
    env = _strings(entry.get("env", {}), "env")
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise ValueError("cwd must be a string")
    return ServerConfig(name, command=command, args=tuple(args), env=env, cwd=cwd, timeout_s=timeout, extra=extra)


def parse_config(text: str) -> McpConfig:
    """An mcp.json's text; never raises: what cannot be used is in .error (the file) or .problems (a server)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return McpConfig(error=f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})")
    if not isinstance(data, dict):
        return McpConfig(error=f'the file must hold a JSON object with "{SERVERS_KEY}"')
    config = McpConfig(extra={key: value for key, value in data.items() if key != SERVERS_KEY})
    servers = data.get(SERVERS_KEY, {})
    if not isinstance(servers, dict):
        config.error = f'"{SERVERS_KEY}" must be an object of servers by name'
        config.extra[SERVERS_KEY] = servers  # kept as written, never replaced by an empty one
        return config
    for name, entry in servers.items():
        try:
            config.servers[name] = parse_server(name, entry)
        except ValueError as e:
            config.problems[name] = f"{name}: {e}"
            config.invalid[name] = entry
    return config


def load_config(path: Path | None = None) -> McpConfig:
    """Specula's mcp.json (default: paths.mcp_config_file()); a missing file is no servers, not an error."""
    path = path if path is not None else default_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return McpConfig()
    except (OSError, UnicodeDecodeError) as e:
        return McpConfig(error=f"{path} could not be read: {getattr(e, 'strerror', None) or e}")
    return parse_config(text)


def save_config(config: McpConfig, path: Path | None = None) -> None:
    """Write config whole or not at all. A file that could not be read is kept beside it as mcp.json.bad
    rather than lost."""
    path = path if path is not None else default_path()
    if config.error and path.exists():
        path.replace(path.with_name(path.name + ".bad"))
    write_json(path, config.to_json(), indent=2)


def default_path() -> Path:
    return mcp_config_file()


def move_secrets_out(server: ServerConfig, make_id=None) -> tuple[ServerConfig, dict[str, str]]:
    """Every env and header value written out is replaced by a "${keyring:ID}" reference; returns the
    server as it is to be saved and {ID: value} for the app to put in the keyring. make_id(server name,
    "env" or "headers", key) -> ID; by default "mcp/NAME/env/KEY"."""
    make_id = make_id or (lambda name, where, key: f"mcp/{name}/{where}/{key}")
    secrets: dict[str, str] = {}

    def refs(values: Mapping[str, str], where: str) -> dict[str, str]:
        out = {}
        for key, value in values.items():
            if secret_id_of(value) is None:
                ref_id = make_id(server.name, where, key)
                secrets[ref_id] = value
                value = secret_ref(ref_id)
            out[key] = value
        return out

    return replace(server, env=refs(server.env, "env"), headers=refs(server.headers, "headers")), secrets


def resolve_secrets(server: ServerConfig, secrets: Mapping[str, str]) -> ServerConfig:
    """server with each "${keyring:ID}" replaced by secrets[ID]; McpConfigError names any that is missing."""
    missing = []

    def values(given: Mapping[str, str], where: str) -> dict[str, str]:
        out = {}
        for key, value in given.items():
            ref = secret_id_of(value)
            if ref is not None:
                if ref not in secrets:
                    missing.append(f"{where} {key}")
                    continue
                value = secrets[ref]
            out[key] = value
        return out

    resolved = replace(server, env=values(server.env, "env"), headers=values(server.headers, "header"))
    if missing:
        raise McpConfigError(
            f"{server.name}: the keyring holds no value for {', '.join(missing)}",
            "Enter the value again in the server's settings.",
        )
    return resolved
