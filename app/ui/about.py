"""Help → About: which Specula this is, where its data lives, and the parts it is built on."""

from __future__ import annotations

import html
import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _metadata_version

from PySide6.QtCore import qVersion

from app.core.store import Store
from engine.paths import data_dir


def about_html(store: Store) -> str:
    folder = html.escape(str(data_dir()))
    return (
        f"<h3>Specula {package_version('specula')}</h3><p>Private, offline chat with local language models, "
        "made fast by speculative decoding.</p>"
        f"<p>Data folder: <code>{folder}</code><br>(models, settings and chats; "
        "set SPECULA_HOME to use another)</p>"
        f"<p>{where_chats_are(store)}</p>"
        f"<p>llama-cpp-python {package_version('llama_cpp_python')} · Qt {qVersion()} · "
        f"Python {platform.python_version()}</p>"
    )


def where_chats_are(store: Store) -> str:
    path = html.escape(str(store.path))
    if store.saved:
        return f"Chats are kept in <code>{path}</code>."
    return f"Chats are kept in memory only this session: <code>{path}</code> could not be written."


def package_version(name: str) -> str:
    """An installed package's version, from its metadata (a bundle that lacks it says so)."""
    try:
        return _metadata_version(name)
    except PackageNotFoundError:
        return "(version unknown)"
