"""MCP servers already configured in other apps (Claude Desktop, LM Studio, Cursor), found and imported.

find_importable() lists the files found, each read with the same checks as Specula's own;
import_servers() copies the chosen servers into a config: one that is already there (same command or url
and settings, whatever its name) is skipped, a different one with a taken name gets a new name.
Imported HTTP servers are not allowed on the network until the user says so, and imported env and
header values are still written out: the app moves them to the keyring (config.move_secrets_out).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.mcp.config import McpConfig, load_config


@dataclass(frozen=True)
class ImportSource:
    """One app's file that was found: app's name, where, and what it holds (problems included)."""

    app: str
    path: Path
    config: McpConfig


@dataclass
class ImportResult:
    config: McpConfig  # the config with the servers added
    added: dict[str, str] = field(default_factory=dict)  # name in Specula -> name in the other app
    skipped: list[str] = field(default_factory=list)  # already there (an identical server), perhaps renamed
    missing: list[str] = field(default_factory=list)  # chosen but not (validly) in the source


def candidate_paths(
    home: Path | None = None, platform: str = sys.platform, environ: Mapping[str, str] = os.environ
) -> list[tuple[str, Path]]:
    """Where each app keeps its MCP servers on this platform, found or not."""
    home = home if home is not None else Path.home()
    if platform == "darwin":
        claude = home / "Library" / "Application Support" / "Claude"
    elif platform == "win32":
        claude = Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
    else:  # Claude Desktop has no Linux build; community builds keep the same file under XDG_CONFIG_HOME
        claude = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
    return [
        ("Claude Desktop", claude / "claude_desktop_config.json"),
        ("LM Studio", home / ".lmstudio" / "mcp.json"),
        ("Cursor", home / ".cursor" / "mcp.json"),
    ]


def find_importable(
    home: Path | None = None, platform: str = sys.platform, environ: Mapping[str, str] = os.environ
) -> list[ImportSource]:
    """The other apps' files that exist here, read (a file that cannot be read says so in config.error)."""
    return [
        ImportSource(app, path, load_config(path))
        for app, path in candidate_paths(home, platform, environ)
        if path.is_file()
    ]


def import_servers(config: McpConfig, source: ImportSource, names: Iterable[str]) -> ImportResult:
    """A copy of config with source's servers named in names added (config itself is left as it was)."""
    result = ImportResult(
        McpConfig(dict(config.servers), dict(config.problems), dict(config.invalid), config.error, dict(config.extra))
    )
    taken = set(result.config.servers) | set(result.config.invalid)
    for name in names:
        server = source.config.servers.get(name)
        if server is None:
            result.missing.append(name)
            continue
        if any(mine.same_server(server) for mine in result.config.servers.values()):
            result.skipped.append(name)  # already here, perhaps under another name: a second copy helps no one
            continue
        new_name = _free_name(name, source.app, taken)
        taken.add(new_name)
        # Network is the user's choice in Specula, whatever the other app allowed.
        result.config.servers[new_name] = replace(server, name=new_name, allow_network=False)
        result.added[new_name] = name
    return result


def _free_name(name: str, app: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    candidate = f"{name} ({app})"
    number = 2
    while candidate in taken:
        candidate = f"{name} ({app} {number})"
        number += 1
    return candidate
