"""Settings: models (from the local library), generation, speculation. Every control has a tooltip.

Only drafts that pass llama.cpp's compatibility rules against the chosen target are offered
(plus "none"); the ones left out are listed with the reason, and a draft file chosen from disk
that does not fit is refused with the reason.

Reading the library (a scan, and the vocabularies the draft check compares) runs on a pool
thread: the dialog opens at once with the current choices and fills the lists when they arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.bridge.hub_tasks import BackgroundTasks
from app.chat.rich_text import TextPane
from app.core.api_keys import ApiKeys
from app.core.attachments import human_size
from app.core.settings import RANGES, ModelSettings, Settings
from app.dialogs.chat_format_settings import ChatFormatControls
from app.dialogs.downloads import download_button
from app.dialogs.remote_engines_dialog import RemoteEnginesDialog
from app.ui import file_dialogs, theme
from engine.config import GPU_LAYERS_ALL, GPU_LAYERS_AUTO, DrafterMode
from engine.errors import EngineError, user_message
from engine.llama import backends, cpu_weights
from engine.models.library import DraftChoices
from engine.paths import history_dir as default_history_dir

log = logging.getLogger(__name__)

MODE_LABELS = {
    DrafterMode.AUTO.value: "Auto: choose per round from measured costs",
    DrafterMode.DRAFT_MODEL.value: "Draft model",
    DrafterMode.MTP.value: "MTP head: the model's own next-token prediction layers",
    DrafterMode.LOOKUP.value: "Prompt lookup",
    DrafterMode.BOTH.value: "Both: lookup when it matches, else the draft model",
    DrafterMode.OFF.value: "Off: plain decoding",
}
NONE_LABEL = "None (no draft model; prompt lookup still works)"
READING = "reading the model library…"
CLOSE_WAIT_MS = 3000


def entry_label(entry) -> str:
    size = entry.file_size / 1e9
    return f"{entry.title} · {entry.size_label} · {entry.quantization} · {size:.2f} GB"


@dataclass(frozen=True)
class ModelChoices:
    """What the Models tab lists, read on a pool thread (library scan and draft checks)."""

    entries: list
    target: object | None  # the chosen target's ModelEntry
    drafts: DraftChoices | None
    draft_problem: str | None  # why the current draft (not offered) cannot be used
    target_problem: str | None  # why the requested target could not be added to the library


def read_choices(library, target_path: str, draft_path: str) -> ModelChoices:
    """On a pool thread (reads headers; touches no widget): the library's view for these choices."""
    target_problem = None
    entries = library.scan()
    if target_path and not any(str(e.path) == target_path for e in entries):
        try:
            library.add_file(target_path)
            entries = library.scan()
        except EngineError as e:
            target_problem = user_message(e)
            log.info("target not added to the library: %s", e)
    draft_problem = None
    if draft_path and Path(draft_path).is_file() and not any(str(e.path) == draft_path for e in entries):
        try:  # a draft chosen outside the library (settings.json, an earlier version): list it, as the target
            library.add_file(draft_path)
            entries = library.scan()
        except EngineError as e:
            draft_problem = user_message(e)
    target = next((e for e in entries if str(e.path) == target_path), None)
    drafts = library.draft_choices(target) if target is not None else None
    if (
        draft_path
        and target is not None
        and not draft_problem
        and all(str(e.path) != draft_path for e in drafts.offered)
    ):
        try:
            draft_problem = library.draft_problem(target.path, draft_path)
        except (OSError, EngineError) as e:
            draft_problem = str(e)
    return ModelChoices(entries, target, drafts, draft_problem, target_problem)


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


class GpuLayersBox(QSpinBox):
    """A layer count, with "auto" and "all" below 0 (engine.config's GPU_LAYERS_AUTO and _ALL)."""

    NAMES = {GPU_LAYERS_AUTO: "auto", GPU_LAYERS_ALL: "all"}

    def __init__(self):
        super().__init__()
        self.setRange(*RANGES["gpu_layers"])

    def textFromValue(self, value: int) -> str:  # noqa: N802 - Qt's name
        return self.NAMES.get(value, str(value))

    def valueFromText(self, text: str) -> int:  # noqa: N802
        named = {name: value for value, name in self.NAMES.items()}
        return named.get(text.strip().lower(), int(text) if text.strip().isdigit() else GPU_LAYERS_AUTO)

    def validate(self, text: str, pos: int):
        word = text.strip().lower()
        if word.isdigit() or word in self.NAMES.values():
            return QValidator.State.Acceptable, text, pos
        if any(name.startswith(word) for name in self.NAMES.values()):
            return QValidator.State.Intermediate, text, pos
        return QValidator.State.Invalid, text, pos


def device_line() -> str:
    """The GPU the engine found, once it has looked (looking loads drivers: never here, on the GUI thread)."""
    found = backends.loaded()
    return found.summary() if found is not None else "the GPU is detected when a model first loads"


class SettingsDialog(QDialog):
    download_requested = Signal()
    models_shown = Signal()  # the model lists were filled from the library (after each refresh)

    def __init__(
        self,
        settings: Settings,
        library=None,
        parent=None,
        *,
        history_dir: Path | None = None,
        erase_history: Callable[[], None] | None = None,
        api_keys: ApiKeys | None = None,
    ):
        """history_dir: the history indexes (default: the data folder's). erase_history: erases them
        through the engine thread (the window's; it also empties a loaded model's index); None: the
        dialog deletes the folder itself (no engine running). api_keys: where remote engines' keys
        are kept (the window's, so keys kept for the session only outlive this dialog); None: the
        dialog makes its own when Remote engines… is first opened."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.library = library
        self.history_dir = history_dir if history_dir is not None else default_history_dir()
        self._erase_history = erase_history
        self.original = settings
        self.api_keys = api_keys
        self.remote_engines = list(settings.remote_engines)
        self.entries = []
        self.tasks = BackgroundTasks(self, max_threads=1)
        self._models_request = 0  # only the newest library read is shown
        self.models_ready = False
        self._before_add = (settings.target.path, settings.draft.path)
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        layout.addWidget(self.tabs)
        self._build_models_tab()
        self._build_generation_tab()
        self._build_speculation_tab()
        self.chat_tab = ChatFormatControls()
        self.tabs.addTab(self.chat_tab, "Chat")
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
        self.remote_button = QPushButton("Remote engines…")
        self.remote_button.setToolTip(
            "Add, edit or remove other computers' servers (another Specula, llama-server, vLLM, SGLang) "
            "whose models you can chat with"
        )
        self.remote_button.clicked.connect(self.edit_remote_engines)
        self.remote_summary = QLabel()
        self.remote_summary.setWordWrap(True)
        theme.tint(self.remote_summary)
        row = QHBoxLayout()
        row.addWidget(self.remote_button)
        row.addWidget(self.remote_summary, 1)
        form.addRow("Remote", row)

        self.context = QSpinBox()
        self.context.setRange(*RANGES["context_size"])
        self.context.setSingleStep(512)
        self.context.setSuffix(" tokens")
        self.context.setToolTip(
            "How much conversation the models can see at once. Larger contexts use more memory; "
            "older messages are left out when a conversation outgrows it."
        )
        form.addRow("Context size", self.context)
        self.device = QLabel(device_line())
        self.device.setWordWrap(True)
        self.device.setToolTip(
            "The GPU llama.cpp found (Vulkan, CUDA or Metal) and its free memory, or why the models run on "
            "the CPU. Set both GPU layer counts to 0 to keep the models off the GPU."
        )
        form.addRow("GPU", self.device)
        self.target_gpu, self.target_threads = self._placement_controls("target")
        form.addRow("Target GPU layers", self.target_gpu)
        form.addRow("Target CPU threads", self.target_threads)
        self.draft_gpu, self.draft_threads = self._placement_controls("draft")
        form.addRow("Draft GPU layers", self.draft_gpu)
        form.addRow("Draft CPU threads", self.draft_threads)
        form.addRow("Intel AMX", self._amx_control())
        self.load_mtp = QCheckBox("Load the model's own MTP head, when its file has one")
        self.load_mtp.setToolTip(
            "Qwen3.5/3.6 and some other models ship next-token prediction (MTP) layers that draft for the "
            "model itself, with no draft file. Loading them costs their weights (a few percent of the model) "
            "and a small context of their own; auto drafts with them only where that pays."
        )
        form.addRow("MTP", self.load_mtp)
        note = QLabel("Changing models, context, GPU layers, threads, AMX or MTP reloads the models.")
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
        gpu = GpuLayersBox()
        gpu.setToolTip(
            f"How many of the {which} model's layers to put on the GPU (Vulkan, CUDA, Metal). “auto” "
            "puts as many as fit in free GPU memory, the draft first; “all” offloads every layer; "
            f"0 keeps the {which} on the CPU."
        )
        threads = QSpinBox()
        threads.setRange(*RANGES["threads"])
        threads.setSpecialValueText("automatic")
        threads.setToolTip(
            f"CPU threads for the {which} model. Automatic uses the physical cores; more threads than cores slows it down."
        )
        return gpu, threads

    def _build_generation_tab(self) -> None:
        page = QWidget()
        form = QFormLayout(page)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(*RANGES["temperature"])
        self.temperature.setSingleStep(0.05)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip(
            "Randomness. 0 always takes the most likely token (greedy: the same answer every time); "
            "higher values give more varied answers."
        )
        form.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(*RANGES["top_p"])
        self.top_p.setSingleStep(0.01)
        self.top_p.setToolTip(
            "Nucleus sampling: keep the most likely tokens that together have this probability. 1 disables it."
        )
        form.addRow("Top-p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(*RANGES["top_k"])
        self.top_k.setSpecialValueText("off")
        self.top_k.setToolTip("Keep only the k most likely tokens at each step. Off keeps all.")
        form.addRow("Top-k", self.top_k)
        self.min_p = QDoubleSpinBox()
        self.min_p.setRange(*RANGES["min_p"])
        self.min_p.setSingleStep(0.01)
        self.min_p.setToolTip("Drop tokens less likely than this fraction of the most likely one. 0 disables it.")
        form.addRow("Min-p", self.min_p)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(*RANGES["max_tokens"])
        self.max_tokens.setToolTip("The longest answer, in tokens. An answer that reaches it stops and says so.")
        form.addRow("Max tokens", self.max_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(*RANGES["seed"])
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
            "when it pays (it may choose plain decoding), from the draft model, prompt lookup or your earlier "
            "conversations (History below). Draft model and prompt lookup force one drafter; "
            "Off decodes plainly. The answer is the same in every mode (lossless)."
        )
        form.addRow("Drafter", self.mode)
        self.draft_length = QSpinBox()
        self.draft_length.setRange(*RANGES["draft_length"])
        self.draft_length.setSpecialValueText("auto (adaptive)")
        self.draft_length.setToolTip(
            "How many tokens to draft per round. Auto adapts it to how often drafts are accepted; a fixed length "
            "always asks for that many."
        )
        form.addRow("Draft length", self.draft_length)
        self._build_history_rows(form)
        info = QLabel(
            "Speculative decoding does not change what the target would say: at temperature 0 you get the "
            "target's own greedy answer (very rarely a near-tie rounds differently in a batch), and above 0 "
            "exactly its distribution. It only changes the speed."
        )
        info.setWordWrap(True)
        theme.tint(info)
        form.addRow(info)
        self.tabs.addTab(page, "Speculation")

    def _build_history_rows(self, form: QFormLayout) -> None:
        self.history_drafting = QCheckBox("Draft from my earlier conversations")
        self.history_drafting.setToolTip(
            "Auto may propose tokens that continued the same words in your earlier chats, for the target to "
            "verify: it speeds up answers that repeat what you ask often. The answers stay the target's own."
        )
        form.addRow("History", self.history_drafting)
        self.history_note = Note(theme.subtle)
        self.history_note.setText(
            f"Kept only on this computer, in {self.history_dir}: your questions and answers as tokens, used by "
            "Auto only (off: nothing new is added). Deleting a chat removes its text from there."
        )
        form.addRow("", self.history_note)
        self.erase_history_button = QPushButton("Erase history…")
        self.erase_history_button.setToolTip(
            "Delete everything kept from your earlier conversations (every model's); your chats stay"
        )
        self.erase_history_button.clicked.connect(self.erase_history)
        self.history_size = QLabel()
        theme.tint(self.history_size)
        row = QHBoxLayout()
        row.addWidget(self.erase_history_button)
        row.addWidget(self.history_size, 1)
        form.addRow("", row)
        self._show_history_size()

    def _show_history_size(self) -> None:
        from engine.history.store import disk_bytes  # numpy: loaded when Settings opens, not at start

        try:
            size = disk_bytes(self.history_dir)
        except OSError as e:  # a file replaced while it was counted (a merge), or an unreadable folder
            self.history_size.setText(f"Size unknown ({e.strerror or e})")
            return
        self.history_size.setText(f"{human_size(size)} on disk" if size else "Nothing kept yet")

    def erase_history(self) -> bool:
        """Ask, then erase every history index (the folder goes). True if erased."""
        answer = QMessageBox.question(
            self,
            "Erase history",
            "Erase everything Specula kept from your earlier conversations for drafting?\n\n"
            "Your chats themselves stay. This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        if self._erase_history is not None:
            self._erase_history()  # on the engine thread, after what runs there now
            self.history_size.setText("Erased")
        else:
            from engine.history.store import erase_everywhere

            erase_everywhere(self.history_dir)
            self._show_history_size()
        return True

    # -- values -------------------------------------------------------------------------------

    def load(self, s: Settings) -> None:
        self.refresh_models(s.target.path, s.draft.path)
        self.context.setValue(s.context_size)
        self.target_gpu.setValue(s.target.gpu_layers)
        self.target_threads.setValue(s.target.threads)
        self.draft_gpu.setValue(s.draft.gpu_layers)
        self.draft_threads.setValue(s.draft.threads)
        self.amx.setChecked(s.allow_amx)
        self.load_mtp.setChecked(s.load_mtp)
        self._load_generation(s)
        self.chat_tab.load(s.chat_templates, s.target.path, s.show_reasoning)
        self.remote_engines = list(s.remote_engines)
        self._show_remote_summary()

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
        self.history_drafting.setChecked(s.history_drafting)

    def restore_defaults(self) -> None:
        defaults = Settings()
        self._load_generation(defaults)

    def done(self, result: int) -> None:
        self._end_tasks()
        super().done(result)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name; a hidden dialog's close skips done()
        self._end_tasks()
        super().closeEvent(event)

    def _end_tasks(self) -> None:
        self._models_request += 1  # a library read still running is shown nowhere
        if not self.tasks.wait(CLOSE_WAIT_MS):
            log.warning("the model library was still being read when Settings closed")

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
            load_mtp=self.load_mtp.isChecked(),
            temperature=round(self.temperature.value(), 4),
            top_p=round(self.top_p.value(), 4),
            top_k=self.top_k.value(),
            min_p=round(self.min_p.value(), 4),
            max_tokens=self.max_tokens.value(),
            seed=self.seed.value(),
            system_prompt=self.system_prompt.toPlainText().strip(),
            drafter_mode=self.mode.currentData(),
            draft_length=self.draft_length.value(),
            history_drafting=self.history_drafting.isChecked(),
            chat_templates=self.chat_tab.result(),
            show_reasoning=self.chat_tab.show_reasoning.isChecked(),
            remote_engines=list(self.remote_engines),
        )

    # -- remote engines -----------------------------------------------------------------------

    def remote_engines_dialog(self) -> RemoteEnginesDialog:
        """The Remote engines dialog for the engines as they stand here (not yet shown)."""
        if self.api_keys is None:
            self.api_keys = ApiKeys()
        return RemoteEnginesDialog(self.remote_engines, self.api_keys, self)

    def edit_remote_engines(self) -> None:
        dialog = self.remote_engines_dialog()
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.remote_engines = dialog.engines()
            self._show_remote_summary()
        dialog.deleteLater()

    def _show_remote_summary(self) -> None:
        names = [e.name for e in self.remote_engines]
        self.remote_summary.setText(
            f"{len(names)} added: {', '.join(names)}" if names else "none: every model runs on this computer"
        )

    # -- models -------------------------------------------------------------------------------

    def refresh_models(self, target_path: str, draft_path: str, announce: bool = False) -> None:
        """Read the library for these choices on a pool thread, then fill the lists.

        Until then the lists hold the given choices, so OK keeps them. announce: the user added
        the target just now, so a failure to add it is shown.
        """
        self._models_request += 1
        request = self._models_request
        self.models_ready = False
        if not self.entries or self.target_combo.findData(target_path) < 0:
            self._show_pending(self.target_combo, target_path, "")
        self._show_pending(self.draft_combo, draft_path, NONE_LABEL)
        if self.library is None:
            self._show_models(ModelChoices([], None, None, None, None), target_path, draft_path, announce)
            return
        library = self.library

        def shown(choices: ModelChoices) -> None:
            if request == self._models_request:
                self._show_models(choices, target_path, draft_path, announce)

        def failed(message: str) -> None:
            if request == self._models_request:
                log.warning("reading the model library failed: %s", message)
                self._show_models(ModelChoices([], None, None, None, None), target_path, draft_path, False)
                self._say(self.target_note, "The model library could not be read. " + message)

        self.tasks.start(lambda _report: read_choices(library, target_path, draft_path), shown, failed)

    @staticmethod
    def _show_pending(combo: QComboBox, path: str, empty_label: str) -> None:
        combo.blockSignals(True)
        combo.clear()
        label = f"{Path(path).name} ({READING})" if path else (empty_label or READING.capitalize())
        combo.addItem(label, path)
        combo.setEnabled(False)
        combo.blockSignals(False)

    def _show_models(self, choices: ModelChoices, target_path: str, draft_path: str, announce: bool) -> None:
        if announce and choices.target_problem:
            # The file the user added is not usable: say why, and go back to the choices before it.
            self._say(self.target_note, choices.target_problem)
            self.refresh_models(*self._before_add)
            return
        self.entries = choices.entries
        self._fill_targets(target_path)
        self._fill_drafts(choices, draft_path)
        self.models_ready = True
        self.models_shown.emit()

    def _fill_targets(self, current: str) -> None:
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
        self.target_combo.setEnabled(True)
        self.target_combo.blockSignals(False)

    def _fill_drafts(self, choices: ModelChoices, current: str) -> None:
        target = choices.target if str(getattr(choices.target, "path", "")) == self.target_combo.currentData() else None
        drafts = choices.drafts.offered if choices.drafts and target is not None else []
        hidden = choices.drafts.hidden if choices.drafts and target is not None else []
        self.draft_combo.clear()
        self.draft_combo.addItem(NONE_LABEL, "")
        for entry in drafts:
            self.draft_combo.addItem(entry_label(entry), str(entry.path))
        self.draft_combo.setEnabled(True)
        if hidden:
            reasons = [f"{e.title}: {reason}" for e, reason in hidden]
            self.hidden_label.setText(
                f"Not offered as drafts for this target ({len(hidden)}): " + "; ".join(reasons) + "."
            )
        else:
            self.hidden_label.setText("")
        self.hidden_label.setVisible(bool(hidden))
        index = self.draft_combo.findData(current) if current else 0
        self.draft_combo.setCurrentIndex(max(index, 0))
        if current and index < 0 and target is not None:
            reason = choices.draft_problem or "it is not in the model library"
            self.hidden_label.setText(
                f"The draft you had, {Path(current).name}, cannot be used with this target: {reason}. "
                + self.hidden_label.text()
            )
            self.hidden_label.setVisible(True)

    def offered_drafts(self) -> list[str]:
        return [self.draft_combo.itemData(i) for i in range(1, self.draft_combo.count())]

    def _target_changed(self, _index: int) -> None:
        self.chat_tab.set_target(self.target_combo.currentData() or "")
        self.refresh_models(self.target_combo.currentData() or "", self.draft_combo.currentData() or "")

    def _add_target_file(self) -> None:
        path = file_dialogs.open_file(self, "Add a GGUF model", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.add_target(path)

    def add_target(self, path: str) -> None:
        """Add a GGUF file to the library and choose it as the target (on a pool thread; a problem is shown)."""
        if self.library is None:
            return
        self._say(self.target_note, "")
        self._before_add = (self.target_combo.currentData() or "", self.draft_combo.currentData() or "")
        self.refresh_models(str(Path(path).expanduser().absolute()), "", announce=True)

    def _choose_draft_file(self) -> None:
        path = file_dialogs.open_file(self, "Choose a draft model", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.use_draft_file(path)

    def use_draft_file(self, path: str) -> bool:
        """Offer a draft file from disk if it fits the target; otherwise explain why not."""
        target = self.target_combo.currentData()
        if not target:
            self._say(self.draft_note, "Choose the target model before its draft.")
            return False
        if self.library is None:
            return False
        try:
            problem = self.library.draft_problem(target, path)  # headers and verdicts come from the caches
            if problem:
                self._say(self.draft_note, f"{Path(path).name} cannot be used as a draft for this target: {problem}.")
                return False
            self.library.add_file(path)
        except EngineError as e:
            self._say(self.draft_note, user_message(e))
            return False
        except OSError as e:
            self._say(self.draft_note, f"{Path(path).name} cannot be read: {e.strerror or e}")
            return False
        self._say(self.draft_note, "")
        if self.draft_combo.findData(path) < 0:
            self.draft_combo.addItem(Path(path).name, path)
        self.draft_combo.setCurrentIndex(self.draft_combo.findData(path))
        return True
