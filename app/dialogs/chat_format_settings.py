"""Settings → Chat: the chat format per model file (its own, a llama.cpp preset, or a Jinja text),
and whether a reasoning model's thinking is shown."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QLabel, QPlainTextEdit, QWidget

from engine.chat import formats as chat_formats

CUSTOM = "\x00jinja"  # the combo's data for "a Jinja template of your own"


class ChatFormatControls(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        form = QFormLayout(self)
        self.format = QComboBox()
        self.format.setToolTip(
            "How conversations are written for this model. Its own: the file's chat template, or llama.cpp's "
            "format for its family when the file has none. Remembered per model file."
        )
        self.format.addItem("The model's own", "")
        for name in chat_formats.builtin_names():
            label = chat_formats.label(name)
            self.format.addItem(label if label == name else f"{label} ({name})", name)
        self.format.addItem("Jinja template of your own…", CUSTOM)
        self.format.currentIndexChanged.connect(self._show_jinja)
        form.addRow("Chat format", self.format)
        self.for_file = QLabel()
        self.for_file.setWordWrap(True)
        form.addRow("", self.for_file)
        self.jinja = QPlainTextEdit()
        self.jinja.setPlaceholderText("{% for message in messages %}…{% endfor %}")
        self.jinja.setToolTip(
            "A Hugging Face style chat template: messages, add_generation_prompt, bos_token, eos_token."
        )
        self.jinja.setFixedHeight(self.fontMetrics().lineSpacing() * 8)
        form.addRow("", self.jinja)
        self.show_reasoning = QCheckBox("Show the thinking of reasoning models")
        self.show_reasoning.setToolTip(
            "Reasoning models (Qwen 3, DeepSeek-R1…) think before they answer: shown in a section above the answer "
            "that folds away when the answer starts. Off: only the answer is shown (the thinking is still kept)."
        )
        form.addRow("Reasoning", self.show_reasoning)
        self.templates: dict[str, str] = {}
        self.target = ""
        self._show_jinja()

    def load(self, templates: dict[str, str], target: str, show_reasoning: bool) -> None:
        self.templates = dict(templates)
        self.show_reasoning.setChecked(show_reasoning)
        self.target = ""
        self.set_target(target)

    def set_target(self, target: str) -> None:
        """Another model was chosen: keep what was set for the previous one, show this one's."""
        if target == self.target:
            return
        self._keep()
        self.target = target
        value = self.templates.get(target, "")
        index = self.format.findData(value) if value else 0
        if index < 0:  # a Jinja text
            index = self.format.findData(CUSTOM)
            self.jinja.setPlainText(value)
        else:
            self.jinja.clear()
        self.format.setCurrentIndex(index)
        self.for_file.setText(f"For {Path(target).name}" if target else "Choose a model first.")
        self.setEnabled(True)
        self.format.setEnabled(bool(target))

    def result(self) -> dict[str, str]:
        self._keep()
        return dict(self.templates)

    def _keep(self) -> None:
        if not self.target:
            return
        data = self.format.currentData()
        value = self.jinja.toPlainText().strip() if data == CUSTOM else data
        if value:
            self.templates[self.target] = value
        else:
            self.templates.pop(self.target, None)

    def _show_jinja(self) -> None:
        self.jinja.setVisible(self.format.currentData() == CUSTOM)
