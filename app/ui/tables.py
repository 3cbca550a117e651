"""Read-only tables of models and repositories: one row per item, whole-row selection."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem


def make_table(headers: list[str], stretch: int = 0) -> QTableWidget:
    """Columns fit their contents, except `stretch`, which takes the remaining width."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().hide()
    table.setAlternatingRowColors(True)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


def add_row(table: QTableWidget, cells: list[str], numeric: frozenset[int] | set[int] = frozenset()) -> int:
    """Append a row; numeric columns are right-aligned. Returns the row's index."""
    row = table.rowCount()
    table.insertRow(row)
    for column, text in enumerate(cells):
        item = QTableWidgetItem(text)
        if column in numeric:
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        table.setItem(row, column, item)
    return row


def selected_row(table: QTableWidget) -> int | None:
    rows = table.selectionModel().selectedRows()
    return rows[0].row() if rows else None


def human_size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
