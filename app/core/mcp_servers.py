"""The user's MCP servers as the app keeps them: what each server is in mcp.json (engine.mcp), the values
of their env and headers in the system keyring (ApiKeys), the file holding "${keyring:ID}" in their
place. No Qt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.core.api_keys import ApiKeys
from engine.mcp import McpConfig, ServerConfig, move_secrets_out, save_config
from engine.mcp.config import secret_id_of


def with_values(server: ServerConfig, api_keys: ApiKeys) -> tuple[ServerConfig, set[str]]:
    """server with each "${keyring:ID}" replaced by the keyring's value, and the keys (of env or headers)
    whose value the keyring does not hold: those keep their reference, to be typed again."""
    missing: set[str] = set()

    def values(given: Mapping[str, str]) -> dict[str, str]:
        out = {}
        for key, value in given.items():
            ref = secret_id_of(value)
            if ref is not None:
                found = api_keys.get(ref)
                if found is None:
                    missing.add(key)
                else:
                    value = found
            out[key] = value
        return out

    return replace(server, env=values(server.env), headers=values(server.headers)), missing


def _refs_in(entry: Any) -> set[str]:
    """The keyring IDs an entry of mcp.json refers to, valid or not (best effort for a malformed one)."""
    if isinstance(entry, ServerConfig):
        return set(entry.secret_ids())
    found = set()
    if isinstance(entry, dict):
        for where in ("env", "headers"):
            values = entry.get(where)
            if isinstance(values, dict):
                found |= {ref for v in values.values() if isinstance(v, str) and (ref := secret_id_of(v))}
    return found


def secrets_moved_out(server: ServerConfig) -> tuple[ServerConfig, dict[str, str]]:
    """move_secrets_out, except that an empty value stays written out: there is nothing to hide, and the
    keyring keeps no empty value (a reference to one would be a missing secret)."""
    saved, secrets = move_secrets_out(server)
    empty = {ref for ref, value in secrets.items() if not value.strip()}
    if not empty:
        return saved, secrets

    def restored(values: Mapping[str, str]) -> dict[str, str]:
        return {key: "" if secret_id_of(value) in empty else value for key, value in values.items()}

    saved = replace(saved, env=restored(saved.env), headers=restored(saved.headers))
    return saved, {ref: value for ref, value in secrets.items() if ref not in empty}


def save_servers(
    servers: Iterable[ServerConfig],
    before: McpConfig,
    api_keys: ApiKeys,
    *,
    keep_invalid: Iterable[str] | None = None,
    path: Path | None = None,
) -> McpConfig:
    """Write servers as Specula's mcp.json, their values written out moved to the keyring first.

    before: the config as it was read (its other top-level keys are kept, and its invalid entries named
    in keep_invalid, default all). Keyring values that no entry refers to any more are deleted once the
    file is written. Raises OSError when the file cannot be written (the keyring then holds the new
    values and still the old ones)."""
    keep = set(before.invalid if keep_invalid is None else keep_invalid)
    config = McpConfig(
        invalid={name: entry for name, entry in before.invalid.items() if name in keep},
        problems={name: problem for name, problem in before.problems.items() if name in keep},
        error=before.error,
        extra=dict(before.extra),
    )
    for server in servers:
        saved, secrets = secrets_moved_out(server)
        for ref, value in secrets.items():
            api_keys.set(ref, value)
        config.servers[saved.name] = saved
    save_config(config, path)
    old = set().union(*map(_refs_in, before.servers.values()), *map(_refs_in, before.invalid.values()))
    now = set().union(*map(_refs_in, config.servers.values()), *map(_refs_in, config.invalid.values()))
    for ref in old - now:
        api_keys.delete(ref)
    config.error = ""  # written: what could not be read is now beside it as mcp.json.bad
    return config
