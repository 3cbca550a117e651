"""Settings: models (from the local library), generation, speculation. Every control has a tooltip.

Only drafts that pass llama.cpp's compatibility rules against the chosen target are offered
(plus "none"); the ones left out are listed with the reason, and a draft file chosen from disk
that does not fit is refused with the reason.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import theme
from app.downloads import download_button
from app.rich_text import TextPane
from app.settings import ModelSettings, Settings
from engine import cpu_weights
from engine.compat import check_compatible
from engine.config import DrafterMode
from engine.errors import EngineError
from engine.gguf import read_header

log = logging.getLogger(__name__)

MODE_LABELS = {
    DrafterMode.AUTO.value: "Auto: choose per round from measured costs",
    DrafterMode.DRAFT_MODEL.value: "Draft model",
    DrafterMode.LOOKUP.value: "Prompt lookup",
    DrafterMode.BOTH.value: "Both: lookup when it matches, else the draft model",
    DrafterMode.OFF.value: "Off: plain decoding",
}
NONE_LABEL = "None (no draft model; prompt lookup still works)"


def entry_label(entry) -> str:
    size = entry.file_size / 1e9
    return f"{entry.name} · {entry.size_label} · {entry.quantization} · {size:.2f} GB"


def hidden_reason(target, draft) -> str:
    """Why the library did not offer draft for target, in a few words (cheap checks first)."""
    if draft.n_params >= target.n_params:
        return "not smaller than the target"
    if draft.n_vocab and target.n_vocab and abs(draft.n_vocab - target.n_vocab) > 128:
        return f"a different vocabulary ({draft.n_vocab:,} tokens, the target has {target.n_vocab:,})"
    return incompatibility_reason(target.path, draft.path) or "a different vocabulary"


def incompatibility_reason(target_path, draft_path) -> str | None:
    try:
        check_compatible(read_header(target_path), read_header(draft_path))
    except EngineError as e:
        return str(e)
    return None


class Note(TextPane):
    """A wrapped, selectable note exactly as tall as its text (a QLabel's wrapped height is
    under-measured inside a form layout in a tab)."""

    def __init__(self, colour_of, parent: QWidget | None = None):
        super().__init__(parent)
        theme.tint(self, colour_of)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)

    def setText(self, text: str) -> None:  # noqa: N802 - QLabel's name, so notes read like labels
        self.setPlainText(text)

    def text(self) -> str:
        return self.toPlainText()


class SettingsDialog(QDialog):
    download_requested = Signal()

    def __init__(self, settings: Settings, library=None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.library = library
        self.original = settings
        self.entries = []
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        layout.addWidget(self.tabs)
        self._build_models_tab()
        self._build_generation_tab()
        self._build_speculation_tab()
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setToolTip(
            "Save the settings; changed models, context, GPU layers or threads reload the models"
        )
        buttons.button(QDialogButtonBox.StandardButton.Cancel).setToolTip("Close without changing anything")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).setToolTip(
            "Reset generation and speculation settings to their defaults (the models stay)"
        )
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(self.restore_defaults)
        layout.addWidget(buttons)
        self.load(settings)
        self.resize(self.fontMetrics().horizontalAdvance("M") * 72, self.sizeHint().height())

    # -- building -----------------------------------------------------------------------------

    def _build_models_tab(self) -> None:
        page = QWidget()
        form = QFormLayout(page)
        self.target_combo = QComboBox()
        self.target_combo.setToolTip(
            "The model that writes the answers. Its output is exactly what you would get without speculation."
        )
        self.target_combo.currentIndexChanged.connect(self._target_changed)
        add = QPushButton("Add GGUF file…")
        add.setToolTip("Add a GGUF model file from anywhere on disk to the library")
        add.clicked.connect(self._add_target_file)
        row = QHBoxLayout()
        row.addWidget(self.target_combo, 1)
        row.addWidget(add)
        form.addRow("Target model", row)
        self.target_note = self._note_label()
        form.addRow("", self.target_note)

        self.draft_combo = QComboBox()
        self.draft_combo.setToolTip(
            "A smaller model with the same vocabulary that proposes tokens for the target to verify in one step. "
            "Only compatible models are listed."
        )
        choose = QPushButton("Other file…")
        choose.setToolTip("Use a draft GGUF file from disk (it is checked against the target first)")
        choose.clicked.connect(self._choose_draft_file)
        row = QHBoxLayout()
        row.addWidget(self.draft_combo, 1)
        row.addWidget(choose)
        form.addRow("Draft model", row)
        self.draft_note = self._note_label()
        form.addRow("", self.draft_note)
        self.hidden_label = Note(theme.subtle)
        form.addRow("", self.hidden_label)

        self.download_button = download_button("Download models…", "Browse and download models from Hugging Face")
        self.download_button.clicked.connect(self.download_requested)
        form.addRow("", self.download_button)

        self.context = QSpinBox()
        self.context.setRange(512, 262_144)
        self.context.setSingleStep(512)
        self.context.setSuffix(" tokens")
        self.context.setToolTip(
            "How much conversation the models can see at once. Larger contexts use more memory; "
            "older messages are left out when a conversation outgrows it."
        )
        form.addRow("Context size", self.context)
        self.target_gpu, self.target_threads = self._placement_controls("target")
        form.addRow("Target GPU layers", self.target_gpu)
        form.addRow("Target CPU threads", self.target_threads)
        self.draft_gpu, self.draft_threads = self._placement_controls("draft")
        form.addRow("Draft GPU layers", self.draft_gpu)
        form.addRow("Draft CPU threads", self.draft_threads)
        form.addRow("Intel AMX", self._amx_control())
        note = QLabel("Changing models, context, GPU layers, threads or AMX reloads the models.")
        theme.tint(note)
        form.addRow("", note)
        self.tabs.addTab(page, "Models")

    def _amx_control(self) -> QCheckBox:
        self.amx = QCheckBox("Let llama.cpp use AMX kernels")
        if cpu_weights.AMX_BUFFER in cpu_weights.offered_buffers():
            self.amx.setToolTip(
                "This CPU has AMX, but llama.cpp's AMX kernels crash on batched decoding, which every "
                f"speculative step uses ({cpu_weights.AMX_ISSUE}). Off, Specula keeps llama.cpp's other "
                "fast CPU kernels. Turn it on only with a llama.cpp build that has the fix."
            )
        else:
            self.amx.setEnabled(False)
            self.amx.setToolTip("llama.cpp does not use AMX on this machine.")
        return self.amx

    def _note_label(self) -> Note:
        note = Note(theme.error_colour)
        note.setVisible(False)
        return note

    @staticmethod
    def _say(note: Note, text: str) -> None:
        note.setText(text)
        note.setVisible(bool(text))

    def _placement_controls(self, which: str) -> tuple[QSpinBox, QSpinBox]:
        gpu = QSpinBox()
        gpu.setRange(-1, 999)
        gpu.setSpecialValueText("all")
        gpu.setToolTip(
            f"How many of the {which} model's layers to put on the GPU (CUDA, Metal). "
            "0 runs on the CPU; “all” offloads every layer. Needs a GPU build of llama-cpp-python."
        )
        threads = QSpinBox()
        threads.setRange(0, 256)
        threads.setSpecialValueText("automatic")
        threads.setToolTip(
            f"CPU threads for the {which} model. Automatic uses the physical cores; more threads than cores slows it down."
        )
        return gpu, threads

    def _build_generation_tab(self) -> None:
        page = QWidget()
        form = QFormLayout(page)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip(
            "Randomness. 0 always takes the most likely token (greedy: the same answer every time); "
            "higher values give more varied answers."
        )
        form.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.0, 1.0)
        self.top_p.setSingleStep(0.01)
        self.top_p.setToolTip(
            "Nucleus sampling: keep the most likely tokens that together have this probability. 1 disables it."
        )
        form.addRow("Top-p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("off")
        self.top_k.setToolTip("Keep only the k most likely tokens at each step. Off keeps all.")
        form.addRow("Top-k", self.top_k)
        self.min_p = QDoubleSpinBox()
        self.min_p.setRange(0.0, 1.0)
        self.min_p.setSingleStep(0.01)
        self.min_p.setToolTip("Drop tokens less likely than this fraction of the most likely one. 0 disables it.")
        form.addRow("Min-p", self.min_p)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 131_072)
        self.max_tokens.setToolTip("The longest answer, in tokens. An answer that reaches it stops and says so.")
        form.addRow("Max tokens", self.max_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setToolTip(
            "The random seed for sampling. Random picks a new one per answer (each answer records its seed, "
            "so Compare with plain decoding can reuse it); a fixed seed repeats answers."
        )
        form.addRow("Seed", self.seed)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("For example: You are a concise assistant.")
        self.system_prompt.setToolTip("Instructions sent before every conversation. Empty: the model's own default.")
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setFixedHeight(self.fontMetrics().lineSpacing() * 5)
        form.addRow("System prompt", self.system_prompt)
        self.tabs.addTab(page, "Generation")

    def _build_speculation_tab(self) -> None:
        page = QWidget()
        form = QFormLayout(page)
        self.mode = QComboBox()
        for value, label in MODE_LABELS.items():
            self.mode.addItem(label, value)
        self.mode.setToolTip(
            "Where draft tokens come from. Auto measures what drafting costs on this machine and drafts only "
            "when it pays (it may choose plain decoding). Draft model and prompt lookup force one drafter; "
            "Off decodes plainly. The answer is the same in every mode (lossless)."
        )
        form.addRow("Drafter", self.mode)
        self.draft_length = QSpinBox()
        self.draft_length.setRange(0, 16)
        self.draft_length.setSpecialValueText("auto (adaptive)")
        self.draft_length.setToolTip(
            "How many tokens to draft per round. Auto adapts it to how often drafts are accepted; a fixed length "
            "always asks for that many."
        )
        form.addRow("Draft length", self.draft_length)
        info = QLabel(
            "Speculative decoding does not change what the target would say: at temperature 0 you get the "
            "target's own greedy answer (very rarely a near-tie rounds differently in a batch), and above 0 "
            "exactly its distribution. It only changes the speed."
        )
        info.setWordWrap(True)
        theme.tint(info)
        form.addRow(info)
        self.tabs.addTab(page, "Speculation")

    # -- values -------------------------------------------------------------------------------

    def load(self, s: Settings) -> None:
        self._fill_targets(s.target.path)
        self._fill_drafts(s.draft.path)
        self.context.setValue(s.context_size)
        self.target_gpu.setValue(s.target.gpu_layers)
        self.target_threads.setValue(s.target.threads)
        self.draft_gpu.setValue(s.draft.gpu_layers)
        self.draft_threads.setValue(s.draft.threads)
        self.amx.setChecked(s.allow_amx)
        self._load_generation(s)

    def _load_generation(self, s: Settings) -> None:
        self.temperature.setValue(s.temperature)
        self.top_p.setValue(s.top_p)
        self.top_k.setValue(s.top_k)
        self.min_p.setValue(s.min_p)
        self.max_tokens.setValue(s.max_tokens)
        self.seed.setValue(s.seed)
        self.system_prompt.setPlainText(s.system_prompt)
        index = self.mode.findData(s.drafter_mode)
        self.mode.setCurrentIndex(max(index, 0))
        self.draft_length.setValue(s.draft_length)

    def restore_defaults(self) -> None:
        defaults = Settings()
        self._load_generation(defaults)

    def result_settings(self) -> Settings:
        return replace(
            self.original,
            target=ModelSettings(
                self.target_combo.currentData() or "", self.target_gpu.value(), self.target_threads.value()
            ),
            draft=ModelSettings(
                self.draft_combo.currentData() or "", self.draft_gpu.value(), self.draft_threads.value()
            ),
            context_size=self.context.value(),
            allow_amx=self.amx.isChecked(),
            temperature=round(self.temperature.value(), 4),
            top_p=round(self.top_p.value(), 4),
            top_k=self.top_k.value(),
            min_p=round(self.min_p.value(), 4),
            max_tokens=self.max_tokens.value(),
            seed=self.seed.value(),
            system_prompt=self.system_prompt.toPlainText().strip(),
            drafter_mode=self.mode.currentData(),
            draft_length=self.draft_length.value(),
        )

    # -- models -------------------------------------------------------------------------------

    def _scan(self) -> list:
        if self.library is None:
            return []
        try:
            return self.library.scan()
        except Exception:  # noqa: BLE001 - a broken library must not keep the dialog from opening
            log.exception("library scan failed")
            return []

    def _fill_targets(self, current: str) -> None:
        self.entries = self._scan()
        if current and not any(str(e.path) == current for e in self.entries) and self.library is not None:
            try:
                self.library.add_file(current)
                self.entries = self._scan()
            except EngineError as e:
                log.info("current target not added to the library: %s", e)
        self.target_combo.blockSignals(True)
        self.target_combo.clear()
        for entry in self.entries:
            self.target_combo.addItem(entry_label(entry), str(entry.path))
            self.target_combo.setItemData(self.target_combo.count() - 1, str(entry.path), Qt.ItemDataRole.ToolTipRole)
        if current and self.target_combo.findData(current) < 0:
            self.target_combo.addItem(f"{Path(current).name} (not readable)", current)
        if not self.entries and not current:
            self.target_combo.addItem("No models yet: add a GGUF file or download one", "")
        self.target_combo.setCurrentIndex(max(self.target_combo.findData(current), 0))
        self.target_combo.blockSignals(False)

    def target_entry(self):
        path = self.target_combo.currentData()
        return next((e for e in self.entries if str(e.path) == path), None)

    def _fill_drafts(self, current: str) -> None:
        target = self.target_entry()
        drafts = []
        if target is not None and self.library is not None:
            try:
                drafts = self.library.compatible_drafts(target)
            except Exception:  # noqa: BLE001
                log.exception("compatible_drafts failed")
        self.draft_combo.clear()
        self.draft_combo.addItem(NONE_LABEL, "")
        for entry in drafts:
            self.draft_combo.addItem(entry_label(entry), str(entry.path))
        hidden = [e for e in self.entries if target is not None and e.path != target.path and e not in drafts]
        if hidden:
            reasons = [f"{e.name}: {hidden_reason(target, e)}" for e in hidden]
            self.hidden_label.setText(
                f"Not offered as drafts for this target ({len(hidden)}): " + "; ".join(reasons) + "."
            )
        else:
            self.hidden_label.setText("")
        self.hidden_label.setVisible(bool(hidden))
        index = self.draft_combo.findData(current) if current else 0
        self.draft_combo.setCurrentIndex(max(index, 0))
        if current and index < 0 and target is not None:
            reason = incompatibility_reason(target.path, current) if Path(current).is_file() else "the file is missing"
            self.hidden_label.setText(
                f"The draft you had, {Path(current).name}, cannot be used with this target: {reason or 'it is not smaller than the target'}. "
                + self.hidden_label.text()
            )
            self.hidden_label.setVisible(True)

    def offered_drafts(self) -> list[str]:
        return [self.draft_combo.itemData(i) for i in range(1, self.draft_combo.count())]

    def _target_changed(self, _index: int) -> None:
        self._fill_drafts(self.draft_combo.currentData() or "")

    def _add_target_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_target(path)

    def add_target(self, path: str) -> bool:
        if self.library is None:
            return False
        try:
            entry = self.library.add_file(path)
        except EngineError as e:
            self._say(self.target_note, e.user_message())
            return False
        self._say(self.target_note, "")
        self._fill_targets(str(entry.path))
        self._fill_drafts("")
        return True

    def _choose_draft_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a draft model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.use_draft_file(path)

    def use_draft_file(self, path: str) -> bool:
        """Offer a draft file from disk if it fits the target; otherwise explain why not."""
        target = self.target_combo.currentData()
        if not target:
            self._say(self.draft_note, "Choose the target model before its draft.")
            return False
        try:
            check_compatible(read_header(target), read_header(path))
            if self.library is not None:
                self.library.add_file(path)
        except EngineError as e:
            self._say(self.draft_note, e.user_message())
            return False
        self._say(self.draft_note, "")
        if self.draft_combo.findData(path) < 0:
            self.draft_combo.addItem(Path(path).name, path)
        self.draft_combo.setCurrentIndex(self.draft_combo.findData(path))
        return True
