"""Remote engines: add, edit and remove other computers' OpenAI-compatible servers (another Specula,
llama-server, vLLM, SGLang), each with a name, an address and an optional API key.

Nothing remote exists until the user adds it here. The address gets a warning when it is outside this
computer and private networks: at once for a literal IP, after a look-up on a pool thread for a host
name (when the field is left, and at Check). Check lists the server's models on a pool thread. The
keys go to the system keyring (app.core.api_keys) when OK is pressed, never to settings.json; where
there is no keyring, the dialog says that keys are kept for this session only.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.bridge.hub_tasks import BackgroundTasks
from app.chat.rich_text import TextPane
from app.core.api_keys import ApiKeys
from app.core.remote_engines import RemoteEngine, address_problem, address_warning
from app.ui import theme
from engine.remote import list_models

log = logging.getLogger(__name__)

CLOSE_WAIT_MS = 3000
CHECK_CONNECT_S = 5.0  # Check is a quick look: a server that does not answer by then is reported
CHECK_READ_S = 30.0
MODELS_NAMED = 6  # models named in Check's line; the rest are counted
EMPTY_HINT = (
    "No remote engines yet. Add one to chat with a model that another computer serves "
    "(another Specula, llama-server, vLLM or SGLang)."
)


@dataclass
class _Entry:
    """One engine as edited here. key: None until read from the keyring (or typed)."""

    id: str
    name: str
    base_url: str
    key: str | None = None
    key_changed: bool = False


def models_line(models) -> str:
    """ "3 models: a, b, c" (the first few named, the rest counted)."""
    ids = [m.id for m in models]
    if not ids:
        return "The server answered but lists no models."
    named = ", ".join(ids[:MODELS_NAMED])
    more = f", and {len(ids) - MODELS_NAMED} more" if len(ids) > MODELS_NAMED else ""
    return f"{len(ids)} model{'s' if len(ids) != 1 else ''}: {named}{more}"


def _plain_text(pal: QPalette) -> QColor:
    return pal.color(QPalette.ColorRole.WindowText)


def _literal_host(base_url: str) -> bool:
    """True when the address names an IP (judged without a look-up), or no host yet."""
    try:
        host = urlsplit(base_url.strip()).hostname
    except ValueError:
        return True
    if not host:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class RemoteEnginesDialog(QDialog):
    """engines(): what OK keeps. resolve: socket.getaddrinfo's signature (tests)."""

    def __init__(self, engines: list[RemoteEngine], api_keys: ApiKeys, parent=None, *, resolve=socket.getaddrinfo):
        super().__init__(parent)
        self.setWindowTitle("Remote engines")
        self.api_keys = api_keys
        self._resolve = resolve
        self._entries = [_Entry(e.id, e.name, e.base_url) for e in engines]
        self._original_ids = {e.id for e in engines}
        self._check_request = 0  # only the newest Check (or look-up) is shown
        self._lookup_request = 0
        self._filling = False
        self.tasks = BackgroundTasks(self, max_threads=2)

        layout = QVBoxLayout(self)
        intro = QLabel(
            "Chat with models served by another computer over its OpenAI-compatible API. Your chats are sent "
            "to the engine you pick; they stay stored here."
        )
        intro.setWordWrap(True)
        theme.tint(intro)
        layout.addWidget(intro)

        body = QHBoxLayout()
        side = QVBoxLayout()
        self.engine_list = QListWidget()
        self.engine_list.setToolTip("The remote engines you added")
        self.engine_list.currentRowChanged.connect(self._show_entry)
        side.addWidget(self.engine_list, 1)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add")
        self.add_button.setToolTip("Add a remote engine")
        self.add_button.clicked.connect(self.add_engine)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Remove the selected engine and forget its API key")
        self.remove_button.clicked.connect(self.remove_engine)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        side.addLayout(row)
        body.addLayout(side, 2)

        self.form_page = QWidget()
        form = QFormLayout(self.form_page)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("e.g. GPU box")
        self.name_edit.setToolTip("Your name for this engine, shown in the model picker")
        self.name_edit.textEdited.connect(self._name_edited)
        form.addRow("Name", self.name_edit)
        self.address_edit = QLineEdit()
        self.address_edit.setPlaceholderText("http://192.168.1.20:8080/v1")
        self.address_edit.setToolTip(
            "The server's base URL, where its /v1/models and /v1/chat/completions are: http://host:port/v1"
        )
        self.address_edit.textEdited.connect(self._address_edited)
        self.address_edit.editingFinished.connect(self._look_up_address)
        form.addRow("Address", self.address_edit)
        self.address_note = self._note()
        form.addRow("", self.address_note)
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("leave empty for none")
        self.key_edit.setToolTip(
            "The server's API key, if it asks for one (sent as a Bearer token). Kept in your system's keyring, "
            "never in Specula's settings file."
        )
        self.key_edit.textEdited.connect(self._key_edited)
        form.addRow("API key", self.key_edit)
        self.key_note = self._note(api_keys.problem if api_keys.session_only else "")
        form.addRow("", self.key_note)
        self.check_button = QPushButton("Check")
        self.check_button.setToolTip("Ask the server for its models, with this address and key")
        self.check_button.clicked.connect(self.check)
        self.check_result = QLabel()
        self.check_result.setWordWrap(True)
        self.check_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        check_row = QHBoxLayout()
        check_row.addWidget(self.check_button)
        check_row.addWidget(self.check_result, 1)
        form.addRow("", check_row)
        self.empty_hint = QLabel(EMPTY_HINT)
        self.empty_hint.setWordWrap(True)
        theme.tint(self.empty_hint)
        right = QVBoxLayout()
        right.addWidget(self.empty_hint)
        right.addWidget(self.form_page)
        right.addStretch(1)
        body.addLayout(right, 5)
        layout.addLayout(body, 1)

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setToolTip(
            "Keep these engines; the keys go to the system keyring"
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

        for entry in self._entries:
            self.engine_list.addItem(QListWidgetItem(self._label(entry)))
        self.engine_list.setCurrentRow(0 if self._entries else -1)
        self._show_entry(self.engine_list.currentRow())
        self.resize(self.fontMetrics().horizontalAdvance("M") * 62, self.fontMetrics().lineSpacing() * 22)

    # -- widgets ------------------------------------------------------------------------------

    @staticmethod
    def _note(text: str = "") -> TextPane:
        """A warning under a field, as tall as its text (a wrapped QLabel's height is mis-measured in a form)."""
        note = TextPane()
        note.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        theme.tint(note, theme.warning_colour)
        RemoteEnginesDialog._say(note, text)
        return note

    @staticmethod
    def _say(note: TextPane, text: str) -> None:
        note.setPlainText(text)
        note.setVisible(bool(text))

    @staticmethod
    def _label(entry: _Entry) -> str:
        host = RemoteEngine(entry.name, entry.base_url, entry.id).host if entry.base_url.strip() else ""
        name = entry.name.strip() or "(unnamed)"
        return f"{name} · {host}" if host and host != name else name

    def _current(self) -> _Entry | None:
        row = self.engine_list.currentRow()
        return self._entries[row] if 0 <= row < len(self._entries) else None

    # -- the list -----------------------------------------------------------------------------

    def add_engine(self) -> None:
        entry = _Entry(RemoteEngine("", "").id, "", "", key="")
        self._entries.append(entry)
        self.engine_list.addItem(QListWidgetItem(self._label(entry)))
        self.engine_list.setCurrentRow(len(self._entries) - 1)
        self.name_edit.setFocus()

    def remove_engine(self) -> None:
        row = self.engine_list.currentRow()
        if not 0 <= row < len(self._entries):
            return
        del self._entries[row]
        self.engine_list.takeItem(row)
        self._show_entry(self.engine_list.currentRow())

    def _show_entry(self, row: int) -> None:
        self._check_request += 1  # a Check of another engine is shown nowhere
        self._lookup_request += 1
        entry = self._entries[row] if 0 <= row < len(self._entries) else None
        self.form_page.setVisible(entry is not None)
        self.empty_hint.setVisible(not self._entries)
        self.remove_button.setEnabled(entry is not None)
        if entry is None:
            return
        if entry.key is None:
            entry.key = self.api_keys.get(entry.id) or ""
        self._filling = True
        self.name_edit.setText(entry.name)
        self.address_edit.setText(entry.base_url)
        self.key_edit.setText(entry.key)
        self._filling = False
        self.check_result.setText("")
        self._address_edited(entry.base_url)
        self._look_up_address()

    def _name_edited(self, text: str) -> None:
        if (entry := self._current()) is not None:
            entry.name = text
            self.engine_list.currentItem().setText(self._label(entry))

    def _key_edited(self, text: str) -> None:
        if (entry := self._current()) is not None:
            entry.key, entry.key_changed = text, True

    # -- the address --------------------------------------------------------------------------

    def _address_edited(self, text: str) -> None:
        """As it is typed: what is wrong with it, or the warning for a literal IP (a name waits for a look-up)."""
        if (entry := self._current()) is not None and not self._filling:
            entry.base_url = text
            self.engine_list.currentItem().setText(self._label(entry))
        self._lookup_request += 1
        if not text.strip():
            self._say(self.address_note, "")
        elif problem := address_problem(text):
            self._say(self.address_note, problem)
        elif _literal_host(text):
            self._say(self.address_note, address_warning(text, self._resolve))
        else:
            self._say(self.address_note, "")

    def _look_up_address(self) -> None:
        """A host name's warning, from a look-up on a pool thread (it may take seconds)."""
        url = self.address_edit.text()
        if not url.strip() or address_problem(url) or _literal_host(url):
            return
        self._lookup_request += 1
        request, resolve = self._lookup_request, self._resolve

        def shown(warning: object) -> None:
            if request == self._lookup_request:
                self._say(self.address_note, str(warning))

        self.tasks.start(lambda _report: address_warning(url, resolve), shown, lambda _message: None)

    # -- Check --------------------------------------------------------------------------------

    def check(self) -> None:
        """List the server's models on a pool thread; show them, or why not."""
        url, key = self.address_edit.text().strip(), self.key_edit.text().strip() or None
        if problem := address_problem(url):
            self.check_result.setText(problem)
            theme.tint(self.check_result, theme.error_colour)
            return
        self._look_up_address()
        self._check_request += 1
        request = self._check_request
        self.check_button.setEnabled(False)
        self.check_result.setText("Asking the server for its models…")
        theme.tint(self.check_result)

        def listed(models: object) -> None:
            if request == self._check_request:
                self.check_button.setEnabled(True)
                self.check_result.setText(models_line(models))
                theme.tint(self.check_result, _plain_text)

        def failed(message: str) -> None:
            if request == self._check_request:
                self.check_button.setEnabled(True)
                self.check_result.setText(message)
                theme.tint(self.check_result, theme.error_colour)

        self.tasks.start(
            lambda _report: list_models(
                url, key, connect_timeout_s=CHECK_CONNECT_S, read_timeout_s=CHECK_READ_S, max_retries=0
            ),
            listed,
            failed,
        )

    # -- the result ---------------------------------------------------------------------------

    def engines(self) -> list[RemoteEngine]:
        """The engines as edited (a nameless one is named after its host)."""
        return [
            RemoteEngine(e.name.strip() or RemoteEngine("", e.base_url).host, e.base_url.strip(), e.id)
            for e in self._entries
        ]

    def accept(self) -> None:
        """Refuses (showing why) while an engine's address is not usable; else stores the keys."""
        for row, entry in enumerate(self._entries):
            if problem := address_problem(entry.base_url):
                self.engine_list.setCurrentRow(row)
                self._say(self.address_note, problem)
                self.address_edit.setFocus()
                return
        kept = {e.id for e in self._entries}
        for engine_id in self._original_ids - kept:
            self.api_keys.delete(engine_id)
        for entry in self._entries:
            if entry.key_changed:
                self.api_keys.set(entry.id, entry.key or "")
        super().accept()

    def done(self, result: int) -> None:
        self._check_request += 1
        self._lookup_request += 1
        if not self.tasks.wait(CLOSE_WAIT_MS):
            log.warning("a remote server was still being asked when Remote engines closed")
        super().done(result)
