"""The app's settings: one dataclass, persisted as JSON (`settings.json` in the data folder).

Loading is forgiving: unknown keys are ignored, a value of the wrong type falls back to its
default, and an unreadable file is set aside as settings.json.bad so the app still starts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from engine.config import DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.paths import data_dir

log = logging.getLogger(__name__)

FILE_NAME = "settings.json"
_SAMPLING = SamplingParams()


@dataclass
class ModelSettings:
    path: str = ""  # "" = none
    gpu_layers: int = 0  # -1: all layers
    threads: int = 0  # 0: automatic (physical cores)


@dataclass
class Settings:
    target: ModelSettings = field(default_factory=ModelSettings)
    draft: ModelSettings = field(default_factory=ModelSettings)
    context_size: int = 4096
    drafter_mode: str = DrafterMode.AUTO.value
    draft_length: int = 0  # 0: adaptive
    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    max_tokens: int = _SAMPLING.max_tokens
    seed: int = -1  # -1: a fresh random seed per answer (recorded with the answer)
    system_prompt: str = ""
    allow_amx: bool = False  # llama.cpp's AMX kernels crash on batched decoding (engine/cpu_weights.py)
    show_token_colours: bool = False
    window_geometry: str = ""  # Qt's saveGeometry(), base64
    splitter_state: str = ""

    # -- to the engine's records --------------------------------------------------------------

    def target_spec(self) -> ModelSpec | None:
        return self._spec(self.target)

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
        return SpecParams(mode=mode, draft_length=self.draft_length or None)

    def load_key(self) -> tuple:
        """What needs a model reload when it changes."""
        return (asdict(self.target), asdict(self.draft), self.context_size, self.allow_amx)

    # -- persistence --------------------------------------------------------------------------

    @staticmethod
    def default_path() -> Path:
        return data_dir() / FILE_NAME

    @classmethod
    def load(cls, path: Path | None = None) -> Settings:
        path = path or cls.default_path()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as e:
            log.warning("Settings in %s unreadable (%s); starting from defaults.", path, e)
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(path.name + ".bad"))
            return cls()
        return _from_dict(cls, data)

    def save(self, path: Path | None = None) -> None:
        path = path or self.default_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


def _from_dict(cls, data: dict):
    default = cls()
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, current = data[f.name], getattr(default, f.name)
        if isinstance(current, ModelSettings):
            values[f.name] = _from_dict(ModelSettings, value) if isinstance(value, dict) else current
        elif isinstance(current, bool):
            values[f.name] = value if isinstance(value, bool) else current
        elif isinstance(current, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            values[f.name] = float(value) if ok else current
        elif isinstance(current, int):
            values[f.name] = value if isinstance(value, int) and not isinstance(value, bool) else current
        elif isinstance(current, str):
            values[f.name] = value if isinstance(value, str) else current
    return cls(**values)
