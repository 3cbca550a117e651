"""The downloader's recent searches: the last few queries, newest first, kept in the data folder
so they outlast the dialog and the app. A convenience only: a damaged file reads as no searches,
and a failed write is logged and forgotten. No Qt here: the dialog calls it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from engine.json_file import write_json
from engine.paths import data_dir

log = logging.getLogger(__name__)

FILE_NAME = "recent_searches.json"
LIMIT = 8


def default_path() -> Path:
    return data_dir() / FILE_NAME


def load(path: Path | None = None) -> list[str]:
    """The remembered queries, newest first; none when the file is missing, damaged or unreadable."""
    try:
        path = path or default_path()
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        log.warning("recent searches in %s unreadable (%s); starting without them", path, e)
        return []
    if not isinstance(data, list):
        log.warning("recent searches in %s are not a list; starting without them", path)
        return []
    return _tidy(q for q in data if isinstance(q, str))


def remember(query: str, path: Path | None = None) -> list[str]:
    """Put query first (an earlier search for it, in any case, goes), save, and return the list."""
    searches = load(path)
    if query.strip():
        searches = _tidy([query, *searches])
        _save(searches, path)
    return searches


def clear(path: Path | None = None) -> None:
    """Forget every recent search."""
    _save([], path)


def _tidy(queries: Iterable[str]) -> list[str]:
    """Stripped, non-empty, the first of each case-insensitive spelling, at most LIMIT."""
    kept: list[str] = []
    seen: set[str] = set()
    for query in queries:
        query = query.strip()
        if query and query.casefold() not in seen:
            seen.add(query.casefold())
            kept.append(query)
    return kept[:LIMIT]


def _save(searches: list[str], path: Path | None) -> None:
    try:
        path = path or default_path()
        write_json(path, searches, indent=None)
    except OSError as e:  # a read-only data folder: searching still works, only unremembered
        log.warning("could not save the recent searches to %s: %s", path, e)
