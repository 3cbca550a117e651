"""MCP servers: add, edit, remove, import and test the servers of Specula's mcp.json.

Each server is a program run here (stdio) or an HTTP server; an HTTP server is used only once its
"Allow this server to use the network" box is ticked. Env and header values go to the system keyring
(app.core.mcp_servers, through ApiKeys) when OK is pressed, never into mcp.json; they are read from it
when a server is first shown. Entries of the file that cannot be used are listed with their problem and
kept as written unless removed. Test starts a server on the dialog's own host, off the GUI thread
(app.bridge.mcp_trial), and shows its tools or why it would not start.
"""

from __future__ import annotations

import html
import json
import threading
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.bridge.mcp_trial import ServerTrial
from app.core.api_keys import ApiKeys
from app.core.mcp_servers import save_servers, with_values
from app.dialogs.mcp_import_dialog import McpImportDialog
from app.dialogs.mcp_server_form import ServerForm, note, say
from app.ui import theme
from engine.mcp import McpConfig, ServerConfig, find_importable, import_servers, load_config
from engine.mcp.config import default_path, parse_server, secret_id_of

EMPTY_HINT = (
    "No MCP servers yet. A server gives chats tools: a program that runs here (files, git, a database) or "
    "an HTTP server. Add one, or import those your other apps use."
)
INTRO = (
    "MCP servers give the model tools, such as reading files or searching. A chat offers the tools of the "
    "servers it is given, and asks you before each call."
)


@dataclass
class _Entry:
    """One server as edited here. entry: as mcp.json holds it; its values are written out once loaded
    from the keyring (at first show), references until then. invalid: a file entry that cannot be used,
    shown with its problem and kept as written."""

    name: str
    entry: Any
    loaded: bool = False
    form_problem: str = ""
    invalid: str = ""


class McpServersDialog(QDialog):
    """servers_changed: mcp.json was written (OK). config: what the file holds now."""

    servers_changed = Signal()

    def __init__(self, api_keys: ApiKeys, parent=None, *, path=None, find_sources=find_importable):
        super().__init__(parent)
        self.setWindowTitle("MCP servers")
        self.api_keys = api_keys
        self.path = path if path is not None else default_path()
        self.config = load_config(self.path)
        self._find_sources = find_sources
        self._entries = [_Entry(name, server.to_json()) for name, server in self.config.servers.items()]
        self._entries += [
            _Entry(name, entry, invalid=self.config.problems[name].removeprefix(f"{name}: "))
            for name, entry in self.config.invalid.items()
        ]
        self._test_request = 0  # only the newest Test is shown
        self.trial = ServerTrial(self)
        self.closer: threading.Thread | None = None  # closes the trial's host after the dialog

        layout = QVBoxLayout(self)
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        theme.tint(intro)
        layout.addWidget(intro)
        self.file_note = note(self._file_problem(), theme.warning_colour)
        layout.addWidget(self.file_note)

        body = QHBoxLayout()
        side = QVBoxLayout()
        self.server_list = QTreeWidget()
        self.server_list.setHeaderLabels(["Server", "Kind", "Network"])
        self.server_list.setRootIsDecorated(False)
        self.server_list.currentItemChanged.connect(lambda *_: self._show_entry(self._row()))
        side.addWidget(self.server_list, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add")
        self.add_button.setToolTip("Add a server")
        self.add_button.clicked.connect(self.add_server)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Remove the selected server and forget its keyring values")
        self.remove_button.clicked.connect(self.remove_server)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        side.addLayout(row)
        self.import_button = QPushButton("Import from other apps…")
        self.import_button.setToolTip("Copy servers configured in Claude Desktop, LM Studio or Cursor")
        self.import_button.clicked.connect(self.import_from_other_apps)
        side.addWidget(self.import_button)
        self.import_note = note()
        side.addWidget(self.import_note)
        body.addLayout(side, 4)

        self.pages = QStackedWidget()
        self.empty_hint = QLabel(EMPTY_HINT)
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignTop)
        theme.tint(self.empty_hint)
        self.pages.addWidget(self.empty_hint)
        self.pages.addWidget(self._form_page(api_keys))
        self.pages.addWidget(self._invalid_page())
        body.addWidget(self.pages, 7)
        layout.addLayout(body, 1)

        self.save_note = note("", theme.error_colour)
        layout.addWidget(self.save_note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

        self.server_list.addTopLevelItems([QTreeWidgetItem() for _ in self._entries])
        self._relabel()
        self.server_list.setCurrentItem(self.server_list.topLevelItem(0))
        self._show_entry(self._row())
        self.resize(self.fontMetrics().horizontalAdvance("M") * 80, self.fontMetrics().lineSpacing() * 40)

    # -- widgets ------------------------------------------------------------------------------

    def _form_page(self, api_keys: ApiKeys) -> QWidget:
        # ApiKeys words its problem for an API key; here it is about these values.
        problem = api_keys.problem.replace("the key is kept", "their values are kept") if api_keys.session_only else ""
        self.form = ServerForm(problem)
        self.form.edited.connect(self._form_edited)
        self.problem_note = note("", theme.error_colour)
        self.test_button = QPushButton("Test")
        self.test_button.setToolTip("Start the server as set here, list its tools, then stop it")
        self.test_button.clicked.connect(self.test_server)
        self.test_status = QLabel()
        self.test_status.setWordWrap(True)
        self.test_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button, 0, Qt.AlignmentFlag.AlignTop)
        test_row.addWidget(self.test_status, 1)
        self.test_result = note("", _plain_text)
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.form)
        column.addWidget(self.problem_note)
        column.addLayout(test_row)
        column.addWidget(self.test_result)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(inner)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        return scroll

    def _invalid_page(self) -> QWidget:
        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(0, 0, 0, 0)
        # Labels, not notes: out of a form a wrapped label is measured right, and a page shown later is not.
        self.invalid_note = QLabel()
        self.invalid_note.setWordWrap(True)
        self.invalid_note.setTextFormat(Qt.TextFormat.PlainText)
        theme.tint(self.invalid_note, theme.error_colour)
        column.addWidget(self.invalid_note)
        hint = QLabel(
            f"It is kept as written, and its tools are not offered. Fix it in {self.path} with a text editor, "
            "or remove it here."
        )
        hint.setWordWrap(True)
        theme.tint(hint)
        column.addWidget(hint)
        self.invalid_text = QLabel()
        self.invalid_text.setFont(theme.monospace())
        self.invalid_text.setTextFormat(Qt.TextFormat.PlainText)
        self.invalid_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        column.addWidget(self.invalid_text)
        column.addStretch(1)
        return page

    def _file_problem(self) -> str:
        if not self.config.error:
            return ""
        return (
            f"{self.path} could not be used: {self.config.error}. Saving writes a new one and keeps this one "
            "beside it as mcp.json.bad."
        )

    # -- entries ------------------------------------------------------------------------------

    def _row(self) -> int:
        item = self.server_list.currentItem()
        return self.server_list.indexOfTopLevelItem(item) if item is not None else -1

    def _current(self) -> _Entry | None:
        row = self._row()
        return self._entries[row] if 0 <= row < len(self._entries) else None

    def problem(self, entry: _Entry) -> str:
        """What keeps entry from being saved, in words ("" when nothing)."""
        if entry.invalid:
            return ""  # kept as written: not the user's edit
        if entry.form_problem:
            return entry.form_problem
        if entry.name and sum(other.name == entry.name for other in self._entries) > 1:
            return f"another server is named {entry.name}"
        try:
            parse_server(entry.name, entry.entry)
        except ValueError as e:
            return str(e)
        return ""

    def _relabel(self) -> None:
        """The list's rows from the entries; OK only while every entry can be saved."""
        blocking = []
        for index, entry in enumerate(self._entries):
            item = self.server_list.topLevelItem(index)
            problem = self.problem(entry)
            if problem:
                blocking.append(f"{entry.name or '(unnamed)'}: {problem}")
            data = entry.entry if isinstance(entry.entry, dict) else {}
            if entry.invalid:
                kind, network = "invalid", ""
            elif "url" in data:
                kind, network = "URL", "allowed" if data.get("allowNetwork") else "off"
            else:
                kind, network = "program", ""
            item.setText(0, ("⚠ " if problem else "") + (entry.name or "(unnamed)"))
            item.setText(1, kind)
            item.setText(2, network)
            tip = entry.invalid or problem
            for column in range(3):
                item.setToolTip(column, tip)
                item.setForeground(column, theme.error_colour() if entry.invalid or problem else theme.palette().text())
        self.ok_button.setEnabled(not blocking)
        self.ok_button.setToolTip(
            "Fix first: " + "; ".join(blocking) if blocking else "Save the servers; their values go to the keyring"
        )
        for column in range(3):
            self.server_list.resizeColumnToContents(column)

    def _show_entry(self, row: int) -> None:
        self._test_request += 1  # a Test of another server is shown nowhere
        entry = self._entries[row] if 0 <= row < len(self._entries) else None
        self.remove_button.setEnabled(entry is not None)
        if entry is None:
            self.pages.setCurrentIndex(0)
            return
        if entry.invalid:
            self.invalid_note.setText(f"This entry of mcp.json cannot be used: {entry.invalid}.")
            self.invalid_text.setText(json.dumps(entry.entry, indent=2, ensure_ascii=False))
            self.pages.setCurrentIndex(2)
            return
        if not entry.loaded:
            self._load_values(entry)
        self.form.show_server(entry.name, entry.entry, _still_references(entry.entry))
        self.test_status.setText("")
        say(self.test_result, "")
        self._show_problem(entry)
        self.pages.setCurrentIndex(1)

    def _load_values(self, entry: _Entry) -> None:
        """Replace the entry's keyring references by their values (those missing stay references)."""
        entry.loaded = True
        try:
            server = parse_server(entry.name, entry.entry)
        except ValueError:
            return
        entry.entry = with_values(server, self.api_keys)[0].to_json()

    def _show_problem(self, entry: _Entry) -> None:
        problem = self.problem(entry)
        say(self.problem_note, problem[:1].upper() + problem[1:] + "." if problem else "")
        self._update_test_button()

    def _update_test_button(self) -> None:
        entry = self._current()
        self.test_button.setEnabled(entry is not None and not entry.invalid and not self.problem(entry))

    def _form_edited(self) -> None:
        entry = self._current()
        if entry is None or entry.invalid:
            return
        entry.name = self.form.name()
        entry.entry, entry.form_problem = self.form.entry()
        self._test_request += 1  # a Test of the server as it was is stale
        self.test_status.setText("")
        say(self.test_result, "")
        self._relabel()
        self._show_problem(entry)

    def add_server(self) -> None:
        self._add(_Entry("", {"command": "", "args": []}, loaded=True))
        self.form.name_edit.setFocus()

    def _add(self, entry: _Entry) -> None:
        self._entries.append(entry)
        self.server_list.addTopLevelItem(QTreeWidgetItem())
        self._relabel()
        self.server_list.setCurrentItem(self.server_list.topLevelItem(len(self._entries) - 1))

    def remove_server(self) -> None:
        row = self._row()
        if not 0 <= row < len(self._entries):
            return
        del self._entries[row]
        self.server_list.takeTopLevelItem(row)
        self._relabel()
        self._show_entry(self._row())

    # -- import -------------------------------------------------------------------------------

    def import_from_other_apps(self) -> None:
        sources = self._find_sources()
        if not sources:
            say(self.import_note, "No Claude Desktop, LM Studio or Cursor configuration was found on this computer.")
            return
        dialog = McpImportDialog(sources, self._config_now(), self)
        if not dialog.exec():
            return
        self.import_chosen(dialog.chosen())

    def import_chosen(self, chosen) -> None:
        """Add the servers chosen in each source (renamed on a clash, network off) and say what happened."""
        config, lines, first = self._config_now(), [], len(self._entries)
        for source, names in chosen:
            result = import_servers(config, source, names)
            config = result.config
            for new_name in result.added:
                self._entries.append(_Entry(new_name, config.servers[new_name].to_json()))
                self.server_list.addTopLevelItem(QTreeWidgetItem())
            if result.added:
                renamed = [old for new, old in result.added.items() if new != old]
                taken = f" ({', '.join(renamed)}: the name was taken here)" if renamed else ""
                lines.append(f"Added from {source.app}: {', '.join(result.added)}{taken}.")
            if result.skipped:
                lines.append(f"Already here, skipped: {', '.join(result.skipped)}.")
            if result.missing:
                lines.append(f"Not found in {source.app}'s file: {', '.join(result.missing)}.")
        say(self.import_note, " ".join(lines) or "Nothing was chosen.")
        self._relabel()
        if len(self._entries) > first:
            self.server_list.setCurrentItem(self.server_list.topLevelItem(first))

    def _config_now(self) -> McpConfig:
        """The servers as edited, with their values, for the import's clash and duplicate checks (names
        not yet valid are taken all the same)."""
        config = McpConfig()
        for entry in self._entries:
            try:
                if entry.invalid:
                    raise ValueError(entry.invalid)
                server = parse_server(entry.name, entry.entry)
            except ValueError:
                config.invalid[entry.name] = entry.entry
                continue
            # Values as the other app writes them, to find a server already here.
            config.servers[entry.name] = server if entry.loaded else with_values(server, self.api_keys)[0]
        return config

    # -- Test ---------------------------------------------------------------------------------

    def test_server(self) -> None:
        entry = self._current()
        if entry is None or entry.invalid or self.problem(entry):
            return
        server = parse_server(entry.name, entry.entry)
        if server.is_http and not server.allow_network:  # said here: the host's own words send the user here
            self.test_status.setText("A test connects to the server: allow it to use the network first.")
            theme.tint(self.test_status, theme.warning_colour)
            say(self.test_result, "")
            return
        secrets = {ref: value for ref in server.secret_ids() if (value := self.api_keys.get(ref)) is not None}
        self._test_request += 1
        request = self._test_request
        self.test_button.setEnabled(False)
        self.test_status.setText(f"Starting {server.name}…")
        theme.tint(self.test_status)
        say(self.test_result, "")

        def listed(tools: object) -> None:
            self._update_test_button()
            if request != self._test_request:
                return
            tools = tuple(tools)  # type: ignore[arg-type]
            self.test_status.setText(f"{server.name} started and offers {len(tools)} tool{'s' * (len(tools) != 1)}:")
            theme.tint(self.test_status, _plain_text)
            self.test_result.setHtml(_tools_html(tools))
            self.test_result.setVisible(bool(tools))

        def failed(message: str) -> None:
            self._update_test_button()
            if request != self._test_request:
                return
            self.test_status.setText("Failed:")
            theme.tint(self.test_status, theme.error_colour)
            say(self.test_result, message)

        self.trial.test(server, secrets, listed, failed)

    # -- the result ---------------------------------------------------------------------------

    def accept(self) -> None:
        """Write mcp.json (values to the keyring); stays open, saying why, when it cannot be written."""
        for entry in self._entries:
            if not entry.invalid and self.problem(entry):
                self._relabel()
                return
        servers: list[ServerConfig] = [parse_server(e.name, e.entry) for e in self._entries if not e.invalid]
        kept = [e.name for e in self._entries if e.invalid]
        try:
            self.config = save_servers(servers, self.config, self.api_keys, keep_invalid=kept, path=self.path)
        except OSError as e:
            say(self.save_note, f"{self.path} could not be written: {e.strerror or e}")
            return
        self.servers_changed.emit()
        super().accept()

    def done(self, result: int) -> None:
        self._test_request += 1
        self.closer = self.trial.close()  # servers being tested stop off the GUI thread
        super().done(result)


def _still_references(entry: dict[str, Any]) -> dict[str, str]:
    """Env or header name -> its "${keyring:ID}", for the values of a loaded entry the keyring did not hold."""
    values = {**entry.get("env", {}), **entry.get("headers", {})}
    return {key: value for key, value in values.items() if secret_id_of(value) is not None}


def _plain_text(pal: QPalette):
    return pal.color(QPalette.ColorRole.WindowText)


def _tools_html(tools) -> str:
    rows = []
    for tool in tools:
        about = html.escape(tool.description.strip().splitlines()[0]) if tool.description.strip() else ""
        rows.append(f"<b>{html.escape(tool.name)}</b>" + (f" — {about}" if about else ""))
    return "<br>".join(rows)
