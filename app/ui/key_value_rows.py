"""Rows of NAME = value, values masked: an MCP server's environment variables or HTTP headers.

A value the keyring no longer holds is shown empty, with a placeholder that asks for it again; left
untouched, the row keeps its "${keyring:ID}" reference, so nothing is lost by opening and saving.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLineEdit, QPushButton, QToolButton, QVBoxLayout, QWidget

MISSING_HINT = "not in the keyring: type it again"


class _Row(QWidget):
    def __init__(self, key: str, value: str, missing_ref: str, revealed: bool, placeholders: tuple[str, str]):
        super().__init__()
        self.missing_ref = missing_ref  # the reference kept while the value is not typed again
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.key_edit = QLineEdit(key)
        self.key_edit.setPlaceholderText(placeholders[0])
        self.value_edit = QLineEdit("" if missing_ref else value)
        self.value_edit.setPlaceholderText(MISSING_HINT if missing_ref else placeholders[1])
        self.value_edit.setEchoMode(QLineEdit.EchoMode.Normal if revealed else QLineEdit.EchoMode.Password)
        self.remove_button = QToolButton()
        self.remove_button.setText("✕")
        self.remove_button.setToolTip("Remove this row")
        layout.addWidget(self.key_edit, 2)
        layout.addWidget(self.value_edit, 3)
        layout.addWidget(self.remove_button)

    def pair(self) -> tuple[str, str]:
        value = self.value_edit.text()
        return self.key_edit.text().strip(), value if value or not self.missing_ref else self.missing_ref


class KeyValueRows(QWidget):
    """edited: the user changed a row, added or removed one."""

    edited = Signal()

    def __init__(self, add_text: str, key_placeholder: str, value_placeholder: str, parent: QWidget | None = None):
        super().__init__(parent)
        self._placeholders = (key_placeholder, value_placeholder)
        self._rows: list[_Row] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self._row_box = QVBoxLayout()
        layout.addLayout(self._row_box)
        buttons = QHBoxLayout()
        self.add_button = QPushButton(add_text)
        self.add_button.clicked.connect(self._add_clicked)
        self.reveal_box = QCheckBox("Show values")
        self.reveal_box.setToolTip("Values are hidden as passwords are; tick to read them")
        self.reveal_box.toggled.connect(self._reveal)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.reveal_box)
        buttons.addStretch(1)
        layout.addLayout(buttons)

    def set_rows(self, pairs: list[tuple[str, str]], missing: dict[str, str] | None = None) -> None:
        """pairs as (name, value); missing: name -> the reference whose value the keyring does not hold."""
        for row in self._rows:
            self._drop(row)
        self._rows = []
        for key, value in pairs:
            self._add(key, value, (missing or {}).get(key, ""))

    def rows(self) -> list[tuple[str, str]]:
        """The rows, without the blank ones."""
        return [pair for row in self._rows if (pair := row.pair()) != ("", "")]

    def problem(self, what: str) -> str:
        """What is wrong with the rows, in words (what: "variable" or "header"), or ""."""
        keys = [key for key, _value in self.rows()]
        if "" in keys:
            return f"a {what} has a value but no name"
        twice = sorted({key for key in keys if keys.count(key) > 1})
        return f"the {what} {twice[0]} is given twice" if twice else ""

    def _add(self, key: str, value: str, missing_ref: str = "") -> _Row:
        row = _Row(key, value, missing_ref, self.reveal_box.isChecked(), self._placeholders)
        row.key_edit.textEdited.connect(self.edited)
        row.value_edit.textEdited.connect(self.edited)
        row.remove_button.clicked.connect(lambda: self._remove(row))
        self._rows.append(row)
        self._row_box.addWidget(row)
        row.show()  # at once: a layout shows a new child only once the event loop runs
        return row

    def _add_clicked(self) -> None:
        self._add("", "").key_edit.setFocus()
        self.edited.emit()

    def _remove(self, row: _Row) -> None:
        self._rows.remove(row)
        self._drop(row)
        self.edited.emit()

    def _drop(self, row: _Row) -> None:
        row.hide()
        self._row_box.removeWidget(row)
        row.deleteLater()

    def _reveal(self, shown: bool) -> None:
        mode = QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password
        for row in self._rows:
            row.value_edit.setEchoMode(mode)
