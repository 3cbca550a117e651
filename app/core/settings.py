"""The app's settings: one dataclass, persisted as JSON (`settings.json` in the data folder).

Loading is forgiving, and says what it forgave (Settings.load_notices, shown at start):
unknown keys are ignored, a value of the wrong type or not a number (NaN) falls back to its
default, a number out of range is clamped to the range the Settings dialog allows, and a file
that is not JSON is moved aside to settings.json.damaged-<time> (never overwritten) so the app
still starts. When the user's model choice could not be read, model_choice_lost is set: the
app then asks rather than quietly choosing the starter pair in its place.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from app.core.remote_engines import RemoteEngine, engine_from_dict
from app.core.set_aside import move_aside
from engine.config import GPU_LAYERS_AUTO, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.json_file import write_json
from engine.paths import data_dir

log = logging.getLogger(__name__)

FILE_NAME = "settings.json"
# 2: GPU layers default to auto. Files of version 1 (no "version" key) hold 0 there only because
# 0 was the default, in an app that never used a GPU: they are read as auto.
VERSION = 2
_SAMPLING = SamplingParams()


# The ranges a number may take (inclusive): the Settings dialog offers these, and load() clamps to them.
RANGES: dict[str, tuple[float, float]] = {
    "gpu_layers": (GPU_LAYERS_AUTO, 999),  # auto, all, or a count
    "threads": (0, 256),
    "context_size": (512, 262_144),
    "draft_length": (0, 16),
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "top_k": (0, 1000),
    "min_p": (0.0, 1.0),
    "max_tokens": (1, 131_072),
    "seed": (-1, 2**31 - 1),
    "text_scale": (0.7, 2.0),
}
THEMES = ("system", "light", "dark")
# Examples a first start offers; the user edits or deletes them (app/dialogs/chat_settings_dialog.py).
_BUILTIN_PRESETS = {
    "Concise": "Answer briefly and directly. Prefer short paragraphs or a list; no preamble, no summary.",
    "Code helper": (
        "You are an expert programmer. Answer with complete, working code in fenced blocks that name "
        "the language, and explain only what is not obvious from the code."
    ),
    "Teacher": (
        "Explain step by step for someone new to the topic. Start with the idea in one sentence, then a "
        "small worked example, then the details."
    ),
}


@dataclass
class ModelSettings:
    path: str = ""  # "" = none
    gpu_layers: int = GPU_LAYERS_AUTO  # GPU_LAYERS_AUTO: what fits in free GPU memory; -1: all; 0: CPU only
    threads: int = 0  # 0: automatic (physical cores)


@dataclass
class Settings:
    version: int = VERSION
    target: ModelSettings = field(default_factory=ModelSettings)
    draft: ModelSettings = field(default_factory=ModelSettings)
    context_size: int = 4096
    drafter_mode: str = DrafterMode.AUTO.value
    draft_length: int = 0  # 0: adaptive
    # Auto may draft from the user's earlier conversations (engine/history), and answers are added to them.
    history_drafting: bool = True
    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    max_tokens: int = _SAMPLING.max_tokens
    seed: int = -1  # -1: a fresh random seed per answer (recorded with the answer)
    system_prompt: str = ""
    # System-prompt presets a chat can pick (name -> prompt), in the order shown; starts with a few examples.
    presets: dict[str, str] = field(default_factory=lambda: dict(_BUILTIN_PRESETS))
    allow_amx: bool = False  # llama.cpp's AMX kernels crash on batched decoding (engine/llama/cpu_weights.py)
    load_mtp: bool = True  # load a target's MTP (next-token prediction) layers, when its file has them, to draft with
    show_token_colours: bool = False
    show_reasoning: bool = True  # a reasoning model's "Thinking" section above its answers
    theme: str = "system"  # THEMES: the system's colours, or Specula's light or dark ones
    text_scale: float = 1.0  # the app's font size relative to the system's (View → Larger/Smaller text)
    # Per model file: a chat format preset name (llama.cpp's) or a Jinja template, instead of the model's own.
    chat_templates: dict[str, str] = field(default_factory=dict)
    base_model_notices: list[str] = field(default_factory=list)  # files whose "base model" notice was shown
    # Other computers' servers the user added (name, address, id); none until they add one. Their API
    # keys are in the system keyring (app.core.api_keys), never here.
    remote_engines: list[RemoteEngine] = field(default_factory=list)
    window_geometry: str = ""  # Qt's saveGeometry(), base64
    splitter_state: str = ""

    # Not saved (not dataclass fields): what load() had to correct, for the user.
    load_notices = ()
    model_choice_lost = False

    # -- to the engine's records --------------------------------------------------------------

    def target_spec(self) -> ModelSpec | None:
        spec = self._spec(self.target)
        return spec.with_(mtp=self.load_mtp) if spec else None

    def draft_spec(self) -> ModelSpec | None:
        return self._spec(self.draft)

    def _spec(self, model: ModelSettings) -> ModelSpec | None:
        if not model.path:
            return None
        return ModelSpec(
            model.path,
            n_gpu_layers=model.gpu_layers,
            n_ctx=self.context_size,
            n_threads=model.threads or None,
            allow_amx=self.allow_amx,
        )

    def chat_template(self) -> str | None:
        """The user's chat format for the chosen target, if they set one."""
        return self.chat_templates.get(self.target.path) or None

    def sampling(self, seed: int | None) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=seed,
            max_tokens=self.max_tokens,
        )

    def spec(self) -> SpecParams:
        try:
            mode = DrafterMode(self.drafter_mode)
        except ValueError:
            mode = DrafterMode.AUTO
        return SpecParams(mode=mode, draft_length=self.draft_length or None, history=self.history_drafting)

    def remote_engine(self, engine_id: str) -> RemoteEngine | None:
        """The remote engine the user added under this id; None if there is none (any more)."""
        return next((e for e in self.remote_engines if e.id == engine_id), None)

    def load_key(self) -> tuple:
        """What needs a model reload when it changes."""
        return (asdict(self.target), asdict(self.draft), self.context_size, self.allow_amx, self.load_mtp)

    # -- persistence --------------------------------------------------------------------------

    @staticmethod
    def default_path() -> Path:
        return data_dir() / FILE_NAME

    @classmethod
    def load(cls, path: Path | None = None) -> Settings:
        """The settings in path (default: the data folder's); defaults where they cannot be used."""
        try:
            path = path or cls.default_path()
            # utf-8-sig: editors on Windows save JSON with a byte order mark.
            data = json.loads(path.read_text(encoding="utf-8-sig"))
            if not isinstance(data, dict):
                raise ValueError("the file holds no JSON object")
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as e:
            return _unreadable(cls, path, e)
        problems: list[str] = []
        settings = _from_dict(cls, data, problems)
        if "version" not in data:
            for model in (settings.target, settings.draft):
                model.gpu_layers = model.gpu_layers or GPU_LAYERS_AUTO
            settings.version = VERSION
        if problems:
            log.warning("Settings in %s corrected: %s", path, "; ".join(problems))
            settings.load_notices = [
                f"Some settings in {path} could not be used as they were:\n• " + "\n• ".join(problems)
            ]
            settings.model_choice_lost = any(p.startswith(("target:", "target.path:")) for p in problems)
        return settings

    def save(self, path: Path | None = None) -> None:
        write_json(path or self.default_path(), asdict(self), indent=2)


def _unreadable(cls, path: Path | None, error: Exception) -> Settings:
    """Defaults, after moving the unreadable file aside (never over another file)."""
    log.warning("Settings in %s unreadable (%s); starting from defaults.", path, error)
    settings = cls()
    settings.model_choice_lost = True
    if path is None:
        settings.load_notices = [f"Specula cannot find its data folder ({error}); the settings are the defaults."]
        return settings
    try:
        aside = move_aside(path)
        kept = f"The file was kept as {aside.name}."
    except OSError as e:
        kept = f"It could not be moved aside ({e.strerror or e}) and was left as it is."
    settings.load_notices = [
        f"Your settings in {path} could not be read ({error}). {kept}\n"
        "Specula uses its defaults for now, so no model is chosen: pick your model again in Settings "
        "(or copy your values over from the kept file)."
    ]
    return settings


def _remote_engines(value: object, problems: list[str], name: str) -> list[RemoteEngine]:
    """The usable entries of value; each one dropped (a malformed entry, an id seen before) is named."""
    if not isinstance(value, list):
        problems.append(f"{name}: {value!r} is not a list of remote engines; using none")
        return []
    engines: list[RemoteEngine] = []
    for index, entry in enumerate(value):
        try:
            engine = engine_from_dict(entry)
        except ValueError as e:
            problems.append(f"{name}[{index}]: left out, {e}")
            continue
        if any(e.id == engine.id for e in engines):
            problems.append(f"{name}[{index}]: left out, its id is used by an earlier entry")
            continue
        engines.append(engine)
    return engines


def _from_dict(cls, data: dict, problems: list[str], prefix: str = ""):
    """cls from data: wrong types and NaN fall back to the default, numbers are clamped to RANGES."""
    default = cls()
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, current = data[f.name], getattr(default, f.name)
        name = prefix + f.name
        if isinstance(current, ModelSettings):
            if isinstance(value, dict):
                values[f.name] = _from_dict(ModelSettings, value, problems, name + ".")
            else:
                problems.append(f"{name}: {value!r} is not a model entry; using none")
            continue
        if f.name == "remote_engines":
            values[f.name] = _remote_engines(value, problems, name)
            continue
        if isinstance(current, dict):
            ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        elif isinstance(current, list):
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif isinstance(current, bool):
            ok = isinstance(value, bool)
        elif isinstance(current, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            value = float(value) if ok else value
        elif isinstance(current, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            problems.append(f"{name}: {value!r} is not a valid value; using {current!r}")
            continue
        low, high = RANGES.get(f.name, (None, None))
        if low is not None and not low <= value <= high:
            clamped = type(current)(min(max(value, low), high))
            problems.append(f"{name}: {value!r} is outside {low}–{high}; using {clamped!r}")
            value = clamped
        values[f.name] = value
    if cls is Settings and values.get("drafter_mode", default.drafter_mode) not in {m.value for m in DrafterMode}:
        problems.append(
            f"drafter_mode: {values['drafter_mode']!r} is not a drafter mode; using {default.drafter_mode!r}"
        )
        values["drafter_mode"] = default.drafter_mode
    if cls is Settings and values.get("theme", default.theme) not in THEMES:
        problems.append(f"theme: {values['theme']!r} is not one of {', '.join(THEMES)}; using {default.theme!r}")
        values["theme"] = default.theme
    return cls(**values)
