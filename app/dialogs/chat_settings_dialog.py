"""The "This chat" dialog: a conversation's system prompt (from a preset, or its own) and its sampling.

Presets are the app's (Settings.presets): picking one copies its text into this chat; "Save as
preset…" stores the text under a name (an existing name is updated), "Delete preset" forgets one
(chats that used it keep their text). Each sampling row is either the app's value (shown, greyed)
or this chat's own.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.chat_settings import INTEGER_FIELDS, SAMPLING_FIELDS, ChatSettings, format_value
from app.core.settings import RANGES, Settings
from app.ui import theme

APP_PROMPT = "The app's system prompt"
OWN_PROMPT = "This chat's own prompt"


class ChatSettingsDialog(QDialog):
    def __init__(self, chat: ChatSettings, settings: Settings, title: str, parent: QWidget | None = None):
        """chat: what the conversation chose; settings: the app's (its presets are edited here)."""
        super().__init__(parent)
        self.setWindowTitle(f"This chat — {title}")
        self.settings = settings
        self.presets = dict(settings.presets)  # edited here; the window saves them with OK
        self.chat = chat
        layout = QVBoxLayout(self)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("M") * 44)  # room for a prompt's lines

        prompt_box = QGroupBox("System prompt")
        prompt_layout = QVBoxLayout(prompt_box)
        row = QHBoxLayout()
        self.preset_combo = QComboBox()
        self.preset_combo.setToolTip(
            "Start from a preset, the app's system prompt (Settings), or write this chat's own"
        )
        self.preset_combo.activated.connect(self._preset_picked)
        row.addWidget(self.preset_combo, 1)
        self.save_preset_button = QPushButton("Save as preset…")
        self.save_preset_button.setToolTip(
            "Keep this text as a preset for other chats (a preset's own name updates it)"
        )
        self.save_preset_button.clicked.connect(lambda: self.save_preset())
        row.addWidget(self.save_preset_button)
        self.delete_preset_button = QPushButton("Delete preset")
        self.delete_preset_button.clicked.connect(self.delete_preset)
        row.addWidget(self.delete_preset_button)
        prompt_layout.addLayout(row)
        self.prompt_edit = QPlainTextEdit()
        self.prompt_edit.setPlaceholderText("No system prompt: the model's own default behaviour.")
        self.prompt_edit.setMinimumHeight(self.fontMetrics().height() * 6)
        self.prompt_edit.textChanged.connect(self._prompt_edited)
        prompt_layout.addWidget(self.prompt_edit)
        layout.addWidget(prompt_box)

        sampling_box = QGroupBox("Sampling for this chat")
        grid = QGridLayout(sampling_box)
        note = QLabel("Ticked values are this chat's own; the others follow Settings.")
        theme.tint(note)
        grid.addWidget(note, 0, 0, 1, 3)
        self.own: dict[str, QCheckBox] = {}
        self.spins: dict[str, QSpinBox | QDoubleSpinBox] = {}
        for row_index, (name, label) in enumerate(SAMPLING_FIELDS.items(), start=1):
            check = QCheckBox(label)
            spin = _spin(name)
            app_value = getattr(settings, name)
            check.setToolTip(f"Settings: {format_value(name, app_value)}")
            check.toggled.connect(lambda on, n=name: self._own_toggled(n, on))
            grid.addWidget(check, row_index, 0)
            grid.addWidget(spin, row_index, 1)
            grid.addWidget(QLabel(f"Settings: {format_value(name, app_value)}"), row_index, 2)
            self.own[name], self.spins[name] = check, spin
        layout.addWidget(sampling_box)

        # Review: the tools this chat may call without asking (chosen with "Always allow" when one was called).
        self.allowed = list(chat.allowed_tools)
        tools_box = QGroupBox("Tools this chat calls without asking")
        tools_layout = QHBoxLayout(tools_box)
        self.allowed_list = QListWidget()
        self.allowed_list.setMaximumHeight(self.fontMetrics().height() * 5)
        self.allowed_list.setToolTip('server/tool: allowed with "Always allow this tool in this chat"')
        tools_layout.addWidget(self.allowed_list, 1)
        self.revoke_button = QPushButton("Revoke")
        self.revoke_button.setToolTip("Ask again before each call of the selected tool")
        self.revoke_button.clicked.connect(self.revoke_selected)
        tools_layout.addWidget(self.revoke_button, 0, Qt.AlignmentFlag.AlignTop)
        self._show_allowed()
        layout.addWidget(tools_box)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.reset_button = buttons.addButton("Use the app's settings", QDialogButtonBox.ButtonRole.ResetRole)
        self.reset_button.setToolTip("Forget this chat's prompt and sampling: follow Settings")
        self.reset_button.clicked.connect(self.reset)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self._show(chat)

    # -- showing a ChatSettings ---------------------------------------------------------------

    def _show(self, chat: ChatSettings) -> None:
        if chat.system_prompt is None:
            self._fill_presets(APP_PROMPT)
        elif chat.preset in self.presets and self.presets[chat.preset] == chat.system_prompt:
            self._fill_presets(chat.preset)
        else:
            self._fill_presets(OWN_PROMPT)
        self._set_prompt(self.settings.system_prompt if chat.system_prompt is None else chat.system_prompt)
        for name, check in self.own.items():
            value = chat.sampling.get(name, getattr(self.settings, name))
            self.spins[name].setValue(value)
            check.setChecked(name in chat.sampling)
            self._own_toggled(name, name in chat.sampling)

    def _fill_presets(self, current: str) -> None:
        self.preset_combo.clear()
        self.preset_combo.addItem(APP_PROMPT)
        for name in self.presets:
            self.preset_combo.addItem(name)
        self.preset_combo.addItem(OWN_PROMPT)
        self.preset_combo.setCurrentText(current)
        self._update_buttons()

    def _set_prompt(self, text: str) -> None:
        self._setting_prompt = True
        self.prompt_edit.setPlainText(text)
        self._setting_prompt = False

    def _update_buttons(self) -> None:
        choice = self.preset_combo.currentText()
        self.delete_preset_button.setEnabled(choice in self.presets)
        self.prompt_edit.setReadOnly(choice == APP_PROMPT)
        self.prompt_edit.setToolTip(
            "The app's system prompt (Settings): pick a preset or This chat's own prompt to change it here"
            if choice == APP_PROMPT
            else ""
        )

    # -- user actions -------------------------------------------------------------------------

    def _preset_picked(self, _index: int = 0) -> None:
        choice = self.preset_combo.currentText()
        if choice == APP_PROMPT:
            self._set_prompt(self.settings.system_prompt)
        elif choice in self.presets:
            self._set_prompt(self.presets[choice])
        self._update_buttons()

    def pick(self, choice: str) -> None:
        """Choose a preset (or APP_PROMPT / OWN_PROMPT) as the user would in the list."""
        self.preset_combo.setCurrentText(choice)
        self._preset_picked()

    _setting_prompt = False

    def _prompt_edited(self) -> None:
        if self._setting_prompt:
            return
        choice = self.preset_combo.currentText()
        text = self.prompt_edit.toPlainText()
        if choice in self.presets and self.presets[choice] != text:
            self.preset_combo.setCurrentText(OWN_PROMPT)  # an edited preset is this chat's own text
            self._update_buttons()

    def save_preset(self, name: str | None = None) -> bool:
        """Store the text as a preset; name None asks for one (the current preset's name offered)."""
        if name is None:
            current = self.preset_combo.currentText()
            offered = current if current in self.presets else ""
            name, ok = QInputDialog.getText(self, "Save as preset", "Preset name:", text=offered)
            if not ok:
                return False
        name = " ".join(name.split())
        if not name or name in (APP_PROMPT, OWN_PROMPT):
            return False
        self.presets[name] = self.prompt_edit.toPlainText()
        self._fill_presets(name)
        return True

    def delete_preset(self) -> None:
        name = self.preset_combo.currentText()
        if self.presets.pop(name, None) is not None:
            self._fill_presets(OWN_PROMPT)  # the text stays this chat's until it picks another

    def _own_toggled(self, name: str, on: bool) -> None:
        spin = self.spins[name]
        spin.setEnabled(on)
        if not on:
            spin.setValue(getattr(self.settings, name))

    def _show_allowed(self) -> None:
        self.allowed_list.clear()
        self.allowed_list.addItems(self.allowed)
        if not self.allowed:
            self.allowed_list.addItem("None: every tool call is asked first.")
        self.allowed_list.setEnabled(bool(self.allowed))
        self.revoke_button.setEnabled(bool(self.allowed))

    def revoke_selected(self) -> None:
        rows = {index.row() for index in self.allowed_list.selectedIndexes()} or {self.allowed_list.currentRow()}
        self.allowed = [key for i, key in enumerate(self.allowed) if i not in rows]
        self._show_allowed()

    def reset(self) -> None:
        self._show(ChatSettings(target=self.chat.target, draft=self.chat.draft))

    # -- the result ---------------------------------------------------------------------------

    def result_chat(self) -> ChatSettings:
        """This chat's choices as the dialog shows them (its models are kept as they were)."""
        choice = self.preset_combo.currentText()
        result = ChatSettings(target=self.chat.target, draft=self.chat.draft)
        # Chosen under the input box, not here: kept as they were (the allowed tools as reviewed).
        result.collections, result.mcp_servers = list(self.chat.collections), list(self.chat.mcp_servers)
        result.allowed_tools = list(self.allowed)
        result.documents_to = list(self.chat.documents_to)
        if choice != APP_PROMPT:
            result.system_prompt = self.prompt_edit.toPlainText()
            result.preset = choice if choice in self.presets else ""
        for name, check in self.own.items():
            if check.isChecked():
                value = self.spins[name].value()
                result.sampling[name] = int(value) if name in INTEGER_FIELDS else round(value, 4)
        return result


def _spin(name: str) -> QSpinBox | QDoubleSpinBox:
    low, high = RANGES[name]
    if name in INTEGER_FIELDS:
        spin = QSpinBox()
        spin.setRange(int(low), int(high))
        if name == "seed":
            spin.setSpecialValueText("random")  # -1: a fresh seed per answer
    else:
        spin = QDoubleSpinBox()
        spin.setRange(low, high)
        spin.setDecimals(2)
        spin.setSingleStep(0.05)
    spin.setAlignment(Qt.AlignmentFlag.AlignRight)
    return spin
