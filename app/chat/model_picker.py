"""The chat header's model picker: the target, a draft among the compatible ones only, and Eject.

Remote engines' models (app.bridge.remote_catalog) are offered after the local ones, badged
"remote · host"; choosing one emits remote_chosen: that chat's answers are computed there, and the
draft is the remote server's business (the draft list is disabled).

The library is read on a pool thread (BackgroundTasks): a scan stats files and reads new headers,
and judging drafts reads vocabularies. Which drafts are offered is ModelLibrary.draft_choices'
answer, never worked out here. Choosing only emits a signal: the window loads through
ModelController, so the GUI thread never waits for a model.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QMenu,
    QSizePolicy,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QToolButton,
    QWidget,
)

from app.bridge.hub_tasks import BackgroundTasks
from app.bridge.remote_catalog import RemoteChoice
from app.core.remote_engines import is_remote, parse_remote_ref
from engine.errors import EngineError

NO_DRAFT = "No draft model"
ADD_REMOTE = "Add a remote engine…"  # the target list's last item (its own data too)


class ModelPicker(QWidget):
    target_chosen = Signal(object)  # a ModelEntry: chat with it (the window picks its best draft)
    remote_chosen = Signal(str)  # a remote engine's model (its reference): this chat's answers are computed there
    add_remote_requested = Signal()  # "Add a remote engine…": the window opens the Remote engines dialog
    draft_chosen = Signal(object)  # a ModelEntry, or None for no draft model
    eject_requested = Signal(str)  # "target" (both models go) or "draft" (the target stays)

    def __init__(self, library_getter, parent: QWidget | None = None):
        """library_getter: returns the ModelLibrary (made on first use, so a start reads nothing)."""
        super().__init__(parent)
        self._library_getter = library_getter
        self.tasks = BackgroundTasks(self, max_threads=1)  # one library read at a time, in order
        self.target_path = ""  # what the settings choose
        self.draft_path = ""
        self.loaded: dict[str, str] = {}  # path -> "target" / "draft": in memory now
        self.remote: list = []  # RemoteChoice: the remote engines' models, after the local ones
        self._last = None  # the newest library read, shown again when the remote models change
        self._filling = False

        self.target_combo = _combo("Target model: the one that writes the answer")
        self.draft_combo = _combo(
            "Draft model: proposes tokens for the target to check. Only drafts that share the target's "
            "vocabulary are offered."
        )
        self.target_combo.activated.connect(self._target_activated)
        self.draft_combo.activated.connect(self._draft_activated)
        self.eject_button = QToolButton()
        self.eject_button.setText("Eject ▾")  # its own arrow: the style's menu indicator overlaps the text
        self.eject_button.setToolTip("Unload a model to free its memory")
        menu = QMenu(self.eject_button)
        self.eject_target_action = menu.addAction("Unload the models", lambda: self.eject_requested.emit("target"))
        self.eject_draft_action = menu.addAction(
            "Unload the draft model (keep the target)", lambda: self.eject_requested.emit("draft")
        )
        self.eject_menu = menu
        self.eject_button.clicked.connect(
            lambda: menu.exec(self.eject_button.mapToGlobal(self.eject_button.rect().bottomLeft()))
        )

        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        row.addWidget(self.target_combo, 1)
        row.addWidget(self.draft_combo, 1)
        row.addWidget(self.eject_button)
        self._update_eject()

    # -- what the window tells it ---------------------------------------------------------------

    def set_models(self, target_path: str, draft_path: str, loaded: dict[str, str] | None = None) -> None:
        """The settings' choice and what is in memory; re-reads the library (off the GUI thread)."""
        self.target_path, self.draft_path = target_path or "", draft_path or ""
        self.loaded = dict(loaded or {})
        self._update_eject()
        self.refresh()

    def set_remote(self, choices: list) -> None:
        """The remote engines' models (app.bridge.remote_catalog.RemoteChoice), offered after the local ones."""
        self.remote = list(choices)
        if self._last is not None:
            self._show(self._last)

    def set_loaded(self, loaded: dict[str, str]) -> None:
        self.loaded = dict(loaded)
        self._update_eject()

    def refresh(self) -> None:
        library_getter, target_path, draft_path = self._library_getter, self.target_path, self.draft_path

        def read(_report):  # on a pool thread: touches no widget
            library = library_getter()
            entries = library.scan()
            target = next((e for e in entries if str(e.path) == target_path), None)
            if target is None and target_path and not is_remote(target_path):
                try:  # chosen by path in the settings, outside the folders the library scans
                    target = library.describe(target_path)
                except (OSError, EngineError):
                    target = None
                entries = entries + [target] if target is not None else entries
            if target is None:
                return entries, None, None
            choices = library.draft_choices(target)
            if draft_path and draft_path not in {str(e.path) for e in choices.offered}:
                try:  # a draft chosen by path: offered only if the library's rules accept it
                    if library.draft_problem(target.path, draft_path) is None:
                        choices.offered.append(library.describe(draft_path))
                except (OSError, EngineError):
                    pass
            return entries, target, choices

        self.tasks.start(read, self._show, lambda _message: None)

    # -- display --------------------------------------------------------------------------------

    def _show(self, result) -> None:
        self._last = result
        entries, target, choices = result
        remote = next((r for r in self.remote if r.ref == self.target_path), None)
        self._filling = True
        try:
            self.target_combo.clear()
            if target is None and remote is None:
                self.target_combo.addItem(_unlisted(self.target_path), None)
            for e in entries:
                self.target_combo.addItem(_label(e), e)
                self.target_combo.setItemData(self.target_combo.count() - 1, _tip(e), _TOOLTIP)
            if self.remote and entries:
                self.target_combo.insertSeparator(self.target_combo.count())
            for r in self.remote:
                self.target_combo.addItem(r.label, r)
                self.target_combo.setItemData(self.target_combo.count() - 1, r.tooltip, _TOOLTIP)
            self.target_combo.insertSeparator(self.target_combo.count())
            self.target_combo.addItem(ADD_REMOTE, ADD_REMOTE)
            self.target_combo.setItemData(
                self.target_combo.count() - 1, "Chat with a model that another computer serves", _TOOLTIP
            )
            if target is not None or remote is not None:
                self.target_combo.setCurrentIndex(self.target_combo.findData(target or remote))
            self.draft_combo.clear()
            self.draft_combo.addItem(NO_DRAFT, None)
            for e in choices.offered if choices else []:
                self.draft_combo.addItem(_label(e), e)
                self.draft_combo.setItemData(self.draft_combo.count() - 1, _tip(e), _TOOLTIP)
            current = next(
                (i for i in range(self.draft_combo.count()) if _path(self.draft_combo.itemData(i)) == self.draft_path),
                0,
            )
            self.draft_combo.setCurrentIndex(current)
            self.draft_combo.setEnabled(target is not None)  # a remote engine drafts on its own
            hidden = len(choices.hidden) if choices else 0
            note = f" ({hidden} other models cannot draft for it; Settings says why)" if hidden else ""
            self.draft_combo.setToolTip(self.draft_combo.toolTip().split(" (")[0] + note)
        finally:
            self._filling = False

    def offered_drafts(self) -> list:
        """The draft entries the combo offers (without "No draft model")."""
        return [self.draft_combo.itemData(i) for i in range(1, self.draft_combo.count())]

    def _target_activated(self, index: int) -> None:
        entry = self.target_combo.itemData(index)
        if entry is None or self._filling:
            return
        if entry == ADD_REMOTE:
            if self._last is not None:
                self._show(self._last)  # the chat's model stays shown
            self.add_remote_requested.emit()
        elif isinstance(entry, RemoteChoice):
            if entry.ref != self.target_path:
                self.remote_chosen.emit(entry.ref)
        elif str(entry.path) != self.target_path:
            self.target_chosen.emit(entry)

    def _draft_activated(self, index: int) -> None:
        entry = self.draft_combo.itemData(index)
        if not self._filling and _path(entry) != self.draft_path:
            self.draft_chosen.emit(entry)

    def _update_eject(self) -> None:
        roles = set(self.loaded.values())
        self.eject_target_action.setEnabled("target" in roles)
        self.eject_draft_action.setEnabled("draft" in roles)
        self.eject_button.setEnabled(bool(roles))


_TOOLTIP = 3  # Qt.ItemDataRole.ToolTipRole


class _ElidingCombo(QComboBox):
    """A combo whose shown text gives way in a narrow window: the size comes first ("0.5B · Qwen2.5-Co…"),
    since it is what tells two models of a family apart; the whole name stays in the item's tooltip."""

    def paintEvent(self, _event) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        room = (
            self.style()
            .subControlRect(QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self)
            .width()
        )
        metrics = self.fontMetrics()
        entry = self.currentData()
        text = option.currentText
        if entry is not None and entry != ADD_REMOTE and metrics.horizontalAdvance(text) > room:
            if isinstance(entry, RemoteChoice):  # where it runs comes first: "remote · Qwen3-…"
                sized = f"remote · {entry.title}"
            else:
                sized = f"{_size(entry)} · {entry.title}" if _size(entry) else entry.title
            text = metrics.elidedText(sized, Qt.TextElideMode.ElideRight, room)
        option.currentText = text
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)


def _combo(tip: str) -> QComboBox:
    combo = _ElidingCombo()
    combo.setToolTip(tip)
    # Narrow windows: the combo shrinks to a few characters (names elide) instead of pushing controls out.
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(6)
    combo.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
    return combo


def _size(entry) -> str:
    """The size the name itself says ("0.5B"; the parameter count includes embeddings: 630M), else the count."""
    named = re.search(r"\b\d+(\.\d+)?[BbMm]\b", entry.title)
    if named:
        return named.group(0)
    return entry.size_label if getattr(entry, "n_params", 0) else ""


def _unlisted(target_path: str) -> str:
    """The first item when the chosen model is not among those listed."""
    remote = parse_remote_ref(target_path)
    return f"{remote[1]} · remote (not reachable now)" if remote else "Choose a model…"


def _label(entry) -> str:
    """The display name with the quantization as a badge: "Qwen2.5-Coder 1.5B Instruct · Q4_K_M"."""
    return f"{entry.title} · {entry.quantization}" if entry.quantization else entry.title


def _tip(entry) -> str:
    return f"{entry.title}\n{entry.size_label} parameters, {entry.quantization}\n{entry.path}"


def _path(entry) -> str:
    return str(entry.path) if entry is not None else ""
