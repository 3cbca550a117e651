"""The list of conversations: new, search (with a snippet of each match), pin, rename (F2 or
double-click), delete with undo, export; grouped under Pinned, Today, Yesterday, Previous 7 days
and Earlier."""

from __future__ import annotations

import datetime
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.store import Conversation
from app.ui import theme

UNDO_MS = 10_000
ID_ROLE = Qt.ItemDataRole.UserRole  # a conversation's id; None on group headers
PINNED_ROLE = Qt.ItemDataRole.UserRole + 1


def age(timestamp: float, now: float | None = None) -> str:
    seconds = (now or time.time()) - timestamp
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return time.strftime("%d %b %Y", time.localtime(timestamp))


def group(conv: Conversation, now: float | None = None) -> str:
    """The heading a conversation is listed under: by calendar day of its last message, pinned apart."""
    if conv.pinned:
        return "Pinned"
    today = datetime.date.fromtimestamp(now or time.time())
    days = (today - datetime.date.fromtimestamp(conv.updated)).days
    if days <= 0:
        return "Today"
    if days == 1:
        return "Yesterday"
    return "Previous 7 days" if days < 7 else "Earlier"


class Sidebar(QFrame):
    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    pin_requested = Signal(int, bool)  # conversation id, pinned
    undo_requested = Signal(int)
    export_requested = Signal(int, str)  # conversation id, "markdown" | "json"
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.setSpacing(6)
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        layout.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setToolTip("Find conversations by title or by any text in them (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(150)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(self._search_timer.start)
        layout.addWidget(self.search)
        self.list = QListWidget()
        self.list.setAccessibleName("Conversations")
        # Not SelectedClicked: a click on the open chat must not start a rename (Delete would then
        # erase its title instead of deleting it).
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_changed)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.list, 1)
        self.empty_label = QLabel("No conversations yet.")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.empty_label.setWordWrap(True)
        self.empty_label.setContentsMargins(4, self.fontMetrics().height(), 4, 0)
        layout.addWidget(self.empty_label, 1)  # stands in for the empty list

        self.undo_bar = QFrame()
        undo = QHBoxLayout(self.undo_bar)
        undo.setContentsMargins(4, 2, 2, 2)
        self.undo_label = QLabel()
        self.undo_label.setWordWrap(True)
        undo.addWidget(self.undo_label, 1)
        self.undo_button = QToolButton()
        self.undo_button.setText("Undo")
        self.undo_button.setToolTip("Bring the deleted conversation back")
        self.undo_button.clicked.connect(self._undo)
        undo.addWidget(self.undo_button)
        self.undo_bar.setVisible(False)
        layout.addWidget(self.undo_bar)
        self._undo_id: int | None = None
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.timeout.connect(lambda: self.undo_bar.setVisible(False))
        self._filling = False
        theme.tint(self.empty_label)

    # -- content ------------------------------------------------------------------------------

    def set_conversations(self, conversations: list[Conversation], current_id: int | None) -> None:
        self._filling = True
        try:
            self.list.clear()
            searching = bool(self.search.text().strip())
            heading = None
            now = time.time()
            for conv in conversations:
                if group(conv, now) != heading:
                    heading = group(conv, now)
                    self.list.addItem(self._header(heading))
                self.list.addItem(self._item(conv, searching))
                if conv.id == current_id:
                    self.list.setCurrentRow(self.list.count() - 1)
            if current_id is None:
                self.list.setCurrentRow(-1)
        finally:
            self._filling = False
        searching = bool(self.search.text().strip())
        self.empty_label.setText("No conversation contains that text." if searching else "No conversations yet.")
        self.empty_label.setVisible(not conversations)
        self.list.setVisible(bool(conversations))

    def _header(self, text: str) -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setFlags(Qt.ItemFlag.NoItemFlags)  # not selectable: the arrow keys and clicks pass it by
        font = item.font()
        font.setBold(True)
        font.setPointSizeF(self.font().pointSizeF() * 0.85)
        item.setFont(font)
        item.setForeground(theme.subtle())
        return item

    def _item(self, conv: Conversation, searching: bool) -> QListWidgetItem:
        # In search results the match shows under the title; renaming waits until the search is cleared.
        item = QListWidgetItem(f"{conv.title}\n{conv.snippet}" if searching and conv.snippet else conv.title)
        item.setData(ID_ROLE, conv.id)
        item.setData(PINNED_ROLE, conv.pinned)
        tip = f"{conv.title}\nLast message {age(conv.updated)}" + (f"\n\n{conv.snippet}" if conv.snippet else "")
        item.setToolTip(tip)
        if not searching:
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
        return item

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item else None

    def ids(self) -> list[int]:
        """The conversations listed, top to bottom (group headings left out)."""
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item.data(ID_ROLE) for item in items if item.data(ID_ROLE) is not None]

    def titles(self) -> list[str]:
        """The titles listed, top to bottom (without search snippets or group headings)."""
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item.text().split("\n")[0] for item in items if item.data(ID_ROLE) is not None]

    def select(self, conversation_id: int) -> None:
        """Open a listed conversation, as a click on it does."""
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == conversation_id:
                self.list.setCurrentRow(i)

    def headings(self) -> list[str]:
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item.text() for item in items if item.data(ID_ROLE) is None]

    def rename_current(self) -> None:
        item = self.list.currentItem()
        if item and item.flags() & Qt.ItemFlag.ItemIsEditable:
            self.list.editItem(item)

    def show_undo(self, conversation_id: int, title: str) -> None:
        self._undo_id = conversation_id
        self.undo_label.setText(f"Deleted “{title}”.")
        self.undo_bar.setVisible(True)
        self._undo_timer.start(UNDO_MS)

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    # -- events -------------------------------------------------------------------------------

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_Delete and self.list.hasFocus() and self.current_id() is not None:
            self.delete_requested.emit(self.current_id())
            return
        super().keyPressEvent(event)

    def _current_changed(self, current: QListWidgetItem | None, _previous) -> None:
        if current is not None and current.data(ID_ROLE) is not None and not self._filling:
            self.conversation_selected.emit(current.data(ID_ROLE))

    def _item_changed(self, item: QListWidgetItem) -> None:
        if self._filling or item.data(ID_ROLE) is None:
            return
        title = item.text().strip()
        if title:
            self.rename_requested.emit(item.data(ID_ROLE), title)

    def _undo(self) -> None:
        if self._undo_id is not None:
            self.undo_requested.emit(self._undo_id)
            self._undo_id = None
        self.undo_bar.setVisible(False)

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(ID_ROLE) is None:
            return
        cid = item.data(ID_ROLE)
        pinned = bool(item.data(PINNED_ROLE))
        menu = QMenu(self)
        menu.addAction("Unpin" if pinned else "Pin to top", lambda: self.pin_requested.emit(cid, not pinned))
        rename = menu.addAction("Rename", lambda: self.list.editItem(item))
        rename.setEnabled(bool(item.flags() & Qt.ItemFlag.ItemIsEditable))
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(cid, "markdown"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(cid, "json"))
        menu.addSeparator()
        menu.addAction("Delete", lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))
