"""The form for one MCP server: a program run on this computer (command, arguments, folder, environment)
or an HTTP server, streamable or SSE (address, headers, and whether it may use the network).

It edits an entry in the mcpServers notation (a dict, as mcp.json holds it); engine.mcp.parse_server
judges it. The arguments are one field, split as a shell would (shlex) and shown back the same way;
on Windows a backslash is a path's separator, not an escape.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.chat.rich_text import TextPane
from app.ui import file_dialogs, theme
from app.ui.key_value_rows import KeyValueRows
from engine.mcp.config import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, NETWORK_KEY, TIMEOUT_KEY

STDIO, HTTP = 0, 1
_FORM_KEYS = {"command", "args", "env", "cwd", "url", "headers", NETWORK_KEY, TIMEOUT_KEY}
NETWORK_NOTE = (
    "Ticked, Specula connects to this address whenever a chat uses this server's tools, and sends it the "
    "tools' arguments. Apart from downloading models, Specula otherwise never uses the network."
)
KEYRING_NOTE = "Values of variables and headers are kept in the system keyring, never in mcp.json."


def split_args(text: str, platform: str = sys.platform) -> list[str]:
    """The arguments typed in one field, split as a shell would; ValueError for an unclosed quote."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = ""  # a '#' is an argument's text (a URL's fragment, a colour), not a comment
    if platform == "win32":
        lexer.escape = ""  # C:\Users\me stays as typed
    return list(lexer)


def join_args(args: list[str]) -> str:
    """args as one line that split_args gives back (single quotes around those that need them)."""
    return shlex.join(args)


def note(text: str = "", colour_of=None) -> TextPane:
    """A note under a field, as tall as its text (a wrapped QLabel's height is mis-measured in a form)."""
    pane = TextPane()
    pane.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
    theme.tint(pane, colour_of)
    say(pane, text)
    return pane


def say(pane: TextPane, text: str) -> None:
    pane.setPlainText(text)
    pane.setVisible(bool(text))


class ServerForm(QWidget):
    """edited: the user changed something. show_server() fills it; name() and entry() read it back."""

    edited = Signal()

    def __init__(self, keyring_problem: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._filling = False
        self._extra: dict[str, Any] = {}
        self._kind_shown = STDIO
        form = self.form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)

        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("e.g. files")
        self.name_edit.setToolTip("The server's name, as chats and the model see its tools' source")
        form.addRow("Name", self.name_edit)
        self.kind_box = QComboBox()
        self.kind_box.addItems(["Program on this computer (stdio)", "HTTP server (streamable HTTP)"])
        self.kind_box.setToolTip("A program Specula starts and talks to, or a server it connects to by address")
        form.addRow("Kind", self.kind_box)

        self.command_edit = QLineEdit()
        self.command_edit.setPlaceholderText("npx, uvx, python3 or a full path")
        self.command_edit.setToolTip("The program to run")
        form.addRow("Command", self.command_edit)
        self.args_edit = QLineEdit()
        self.args_edit.setPlaceholderText('-y @modelcontextprotocol/server-filesystem "/my folder"')
        self.args_edit.setToolTip("The program's arguments, split as a shell would: quote one that holds spaces")
        form.addRow("Arguments", self.args_edit)
        self.cwd_edit = QLineEdit()
        self.cwd_edit.setPlaceholderText("optional")
        self.cwd_edit.setToolTip("The folder the program runs in")
        self.cwd_row = QWidget()
        cwd_row = QHBoxLayout(self.cwd_row)
        cwd_row.setContentsMargins(0, 0, 0, 0)
        cwd_row.addWidget(self.cwd_edit, 1)
        self.cwd_button = QPushButton("Choose…")
        self.cwd_button.clicked.connect(self._choose_folder)
        cwd_row.addWidget(self.cwd_button)
        form.addRow("Folder", self.cwd_row)
        self.env_rows = KeyValueRows("Add variable", "NAME", "value")
        self.env_rows.setToolTip("Environment variables for the program (tokens, keys, options)")
        form.addRow("Environment", self.env_rows)

        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("https://mcp.example.com/mcp")
        self.url_edit.setToolTip(
            "The server's endpoint: streamable HTTP (often …/mcp), or the older SSE transport (an address ending "
            'in /sse, or "type": "sse" in mcp.json)'
        )
        form.addRow("Address", self.url_edit)
        self.header_rows = KeyValueRows("Add header", "Authorization", "Bearer …")
        self.header_rows.setToolTip("HTTP headers sent with every request (an Authorization token, an API key)")
        form.addRow("Headers", self.header_rows)
        self.network_box = QCheckBox("Allow this server to use the network")
        form.addRow("", self.network_box)
        self.network_note = note(NETWORK_NOTE)
        form.addRow("", self.network_note)

        self.timeout_box = QSpinBox()
        self.timeout_box.setRange(0, MAX_TIMEOUT_S)
        self.timeout_box.setSuffix(" s")
        self.timeout_box.setSpecialValueText(f"{DEFAULT_TIMEOUT_S} s (the default)")  # 0: the entry sets none
        self.timeout_box.setToolTip(
            "How long one call to this server's tools may take before it is cancelled (Stop ends it sooner): "
            "raise it for tools that run builds or tests"
        )
        form.addRow("Time limit", self.timeout_box)

        self.keyring_note = note(keyring_problem or KEYRING_NOTE, theme.warning_colour if keyring_problem else None)
        form.addRow("", self.keyring_note)

        for edit in (self.name_edit, self.command_edit, self.args_edit, self.cwd_edit, self.url_edit):
            edit.textEdited.connect(self._changed)
        self.kind_box.currentIndexChanged.connect(self._kind_changed)
        self.network_box.toggled.connect(self._changed)
        self.timeout_box.valueChanged.connect(self._changed)
        self.env_rows.edited.connect(self._changed)
        self.header_rows.edited.connect(self._changed)
        self._show_kind(STDIO)

    # -- filling and reading ----------------------------------------------------------------------

    def show_server(self, name: str, entry: dict[str, Any], missing: dict[str, str] | None = None) -> None:
        """Fill the form with an entry of mcpServers; missing: env or header name -> its "${keyring:ID}",
        for values the keyring does not hold."""
        self._filling = True
        self._extra = {key: value for key, value in entry.items() if key not in _FORM_KEYS}
        self._kind_shown = HTTP if "url" in entry else STDIO
        self.name_edit.setText(name)
        self.kind_box.setCurrentIndex(self._kind_shown)
        self.command_edit.setText(str(entry.get("command", "")))
        self.args_edit.setText(join_args(entry.get("args", [])))
        self.cwd_edit.setText(str(entry.get("cwd", "")))
        self.env_rows.set_rows(list(entry.get("env", {}).items()), missing)
        self.url_edit.setText(str(entry.get("url", "")))
        self.header_rows.set_rows(list(entry.get("headers", {}).items()), missing)
        self.network_box.setChecked(bool(entry.get(NETWORK_KEY, False)))
        timeout = entry.get(TIMEOUT_KEY)
        ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        self.timeout_box.setValue(max(1, round(timeout)) if ok else 0)
        self._show_kind(self._kind_shown)
        self._filling = False

    def name(self) -> str:
        return self.name_edit.text().strip()

    def entry(self) -> tuple[dict[str, Any], str]:
        """The entry as mcp.json would hold it (values written out), and what the form itself finds wrong
        with it ("" when nothing; parse_server judges the rest)."""
        entry = dict(self._extra)
        if self.timeout_box.value():
            entry[TIMEOUT_KEY] = self.timeout_box.value()
        if self.kind_box.currentIndex() != self._kind_shown:
            entry.pop("type", None)  # Cursor's "type" said the other kind
        if self.kind_box.currentIndex() == HTTP:
            entry["url"] = self.url_edit.text().strip()
            entry["headers"] = dict(self.header_rows.rows())
            entry[NETWORK_KEY] = self.network_box.isChecked()
            return entry, self.header_rows.problem("header")
        entry["command"] = self.command_edit.text().strip()
        problem = ""
        try:
            entry["args"] = split_args(self.args_edit.text())
        except ValueError as e:  # an unclosed quote
            entry["args"], problem = [], f"the arguments cannot be split: {str(e).lower()}"
        entry["env"] = dict(self.env_rows.rows())
        if cwd := self.cwd_edit.text().strip():
            entry["cwd"] = cwd
        return entry, problem or self.env_rows.problem("variable")

    # -- reacting ---------------------------------------------------------------------------------

    def _changed(self, *_args) -> None:
        if not self._filling:
            self.edited.emit()

    def _kind_changed(self, kind: int) -> None:
        self._show_kind(kind)
        self._changed()

    def _show_kind(self, kind: int) -> None:
        for widget, shown in (
            (self.command_edit, kind == STDIO),
            (self.args_edit, kind == STDIO),
            (self.cwd_row, kind == STDIO),
            (self.env_rows, kind == STDIO),
            (self.url_edit, kind == HTTP),
            (self.header_rows, kind == HTTP),
            (self.network_box, kind == HTTP),
            (self.network_note, kind == HTTP),
        ):
            self.form.setRowVisible(widget, shown)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "The folder the server runs in", self.cwd_edit.text() or file_dialogs.start_folder()
        )
        if folder:
            self.cwd_edit.setText(folder)
            self._changed()
