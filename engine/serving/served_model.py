"""The loaded model as the server presents it: its names, its /v1/models card, its answers' defaults.

One derivation for both owners of a server, `python -m engine serve` (the loaded Engine and the
command line's sampling) and the app's Local server (the app's model and its current settings),
so the two cannot drift apart in what they call the model or how they answer by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.config import SamplingParams, SpecParams
from engine.serving.config import ServerConfig
from engine.serving.openai_api import Defaults

if TYPE_CHECKING:  # the name only: importing EngineInfo loads llama.cpp
    from engine import EngineInfo


@dataclass(frozen=True)
class ServedModel:
    """What is loaded, and how a request that does not say otherwise is answered.

    sampling: None for SamplingParams' defaults with max_tokens at the server's limit; a larger
    max_tokens is lowered to the limit. spec: None for SpecParams()'s.
    """

    path: str  # the target's file
    info: EngineInfo
    sampling: SamplingParams | None = None
    spec: SpecParams | None = None


def model_names(path: str, target_name: str, model_id: str = "") -> tuple[str, ...]:
    """The names a request may use for the loaded model; the first is the id /v1/models lists:
    model_id if set, else the file's name without .gguf; the file name and the model's own name also do."""
    file_name = os.path.basename(path)
    stem = file_name[: -len(".gguf")] if file_name.lower().endswith(".gguf") else file_name
    names = [model_id or stem, stem, file_name, target_name]
    return tuple(dict.fromkeys(n for n in names if n))


def model_card(path: str, names: tuple[str, ...], info: EngineInfo) -> dict:
    """/v1/models' entry for the loaded model: OpenAI's fields, and the context it was loaded with
    where other clients look for it. `max_model_len` is vLLM's name (its ModelCard) for the tokens
    a request may use, prompt and answer together; `meta` follows llama-server's object, whose
    `n_ctx_train` is the model's trained context (not what is loaded), with `n_ctx` beside it."""
    try:
        created = int(os.path.getmtime(path))
    except OSError:
        created = 0
    return {
        "id": names[0],
        "object": "model",
        "created": created,
        "owned_by": "specula",
        "max_model_len": info.n_ctx,
        "meta": {
            "name": info.target_name,
            "draft": info.draft_name,
            "n_ctx": info.n_ctx,
            "n_ctx_train": info.n_ctx_train or None,
            "backend": info.backend,
        },
    }


def serving_terms(config: ServerConfig, model: ServedModel | None) -> tuple[Defaults, dict | None]:
    """(Defaults, /v1/models card) for the model; with none loaded, no names and no card: every
    request is then answered 503 "No model is loaded"."""
    limit = config.max_tokens_limit
    if model is None:
        return Defaults(SamplingParams(max_tokens=limit), SpecParams(), limit, False, ()), None
    sampling = model.sampling or SamplingParams(max_tokens=limit)
    names = model_names(model.path, model.info.target_name, config.model_id)
    defaults = Defaults(
        sampling=sampling.with_(max_tokens=min(sampling.max_tokens, limit)),
        spec=model.spec or SpecParams(),
        max_tokens_limit=limit,
        has_draft=model.info.draft_name is not None,
        model_names=names,
    )
    return defaults, model_card(model.path, names, model.info)
