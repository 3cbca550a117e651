"""Where Specula keeps models and data (platformdirs), overridable with SPECULA_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Specula"


def data_dir() -> Path:
    """Root of everything Specula writes: models/, chats.sqlite3, settings."""
    override = os.environ.get("SPECULA_HOME")
    root = Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    root.mkdir(parents=True, exist_ok=True)
    return root


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def history_dir() -> Path:
    """The user's history indexes (engine/history), one folder per vocabulary: only ever on this machine."""
    return data_dir() / "history"


def auto_memory_file() -> Path:
    """What auto learned of each model pair's drafters (engine/decoding/auto_memory): only ever on this machine."""
    return data_dir() / "auto_memory.json"


def documents_dir() -> Path:
    """The document library's collections and index (engine/documents): only ever on this machine."""
    return data_dir() / "documents"


def mcp_config_file() -> Path:
    """The MCP servers the user configured (engine/mcp), in the mcpServers notation other apps use."""
    return data_dir() / "mcp.json"
