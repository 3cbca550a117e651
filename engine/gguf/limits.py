"""What llama.cpp asserts on while loading a model, checked from the header first.

llama.cpp reports most bad files as an error, but a few header values trip a GGML_ASSERT in
`llama_model::load_hparams` (src/llama-model.cpp) and abort the whole process: a layer count
outside 1..LLAMA_MAX_LAYERS, an unknown RoPE scaling type, impossible expert counts. A model
file is data from anywhere, so those values are refused here with a message instead.
The limits are those of the llama.cpp that llama-cpp-python 0.3.36 vendors.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from importlib import metadata, resources
from typing import TYPE_CHECKING

from engine.errors import ModelFileError

if TYPE_CHECKING:
    from engine.gguf.header import GGUFInfo

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (src/llama-hparams.h)
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # LLAMA_ROPE_SCALING_TYPES


@lru_cache(maxsize=1)
def known_architectures() -> frozenset[str] | None:
    """llama.cpp's architecture names, or None when the installed llama.cpp is not the one listed.

    A newer llama-cpp-python may know more architectures than the list: then the check is
    left to llama.cpp, which reports an unknown architecture as an error, not a crash.
    """
    data = json.loads(resources.files("engine").joinpath("data/llama_architectures.json").read_text("utf-8"))
    try:
        installed = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None
    return frozenset(data["architectures"]) if installed == data["llama_cpp_python"] else None


def check_llama_limits(info: GGUFInfo) -> None:
    """Raise ModelFileError, naming the file and the value, for what llama.cpp cannot load."""
    label = f"'{os.path.basename(info.path)}'" if info.path else "The file"
    arch = info.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"{label} is damaged: it does not say which model architecture it holds.")
    known = known_architectures()
    if known is not None and arch not in known:
        raise ModelFileError(
            f"{label} holds a model of architecture '{arch}', which this version of llama.cpp does not know.",
            hint="It may be damaged, or need a newer llama-cpp-python.",
        )
    if arch == "clip":
        return  # a vision projector: no layers of its own to check

    def damaged(problem: str) -> ModelFileError:
        return ModelFileError(f"{label} is damaged: {problem}.")

    layers = info.get(f"{arch}.block_count")
    if layers is None:
        raise damaged(f"it has no layer count ({arch}.block_count)")
    if not _is_count(layers):
        raise damaged(f"its layer count ({arch}.block_count) is {layers!r}, not a whole number")
    if not 0 < layers <= MAX_LAYERS:
        raise damaged(f"its layer count ({arch}.block_count) is {layers:,}; llama.cpp accepts 1 to {MAX_LAYERS}")
    nextn = info.get(f"{arch}.nextn_predict_layers")
    if _is_count(nextn) and nextn > layers:
        raise damaged(f"{arch}.nextn_predict_layers is {nextn:,}, more than its {layers} layers")
    _check_experts(info, arch, damaged)
    scaling = info.get(f"{arch}.rope.scaling.type")
    if isinstance(scaling, str) and scaling not in ROPE_SCALING_TYPES:
        raise damaged(f"its RoPE scaling type ({arch}.rope.scaling.type) is '{scaling}', which llama.cpp does not know")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_experts(info: GGUFInfo, arch: str, damaged) -> None:
    """The expert-count asserts of load_hparams (values of the wrong type llama.cpp reports itself)."""
    experts = info.get(f"{arch}.expert_count", 0)
    used = info.get(f"{arch}.expert_used_count", 0)  # one number, or one per layer
    groups = info.get(f"{arch}.expert_group_count", 0)
    groups_used = info.get(f"{arch}.expert_group_used_count", 0)
    if isinstance(used, list):
        used = max((u for u in used if _is_count(u)), default=0)
    if not all(_is_count(v) for v in (experts, used, groups, groups_used)):
        return
    if arch in ("hunyuan_vl", "hunyuan-dense") and experts <= 1:
        experts = used = 0
    if experts > MAX_EXPERTS:
        raise damaged(f"{arch}.expert_count is {experts:,}; llama.cpp accepts at most {MAX_EXPERTS}")
    if used > experts:
        raise damaged(f"{arch}.expert_used_count is {used:,}, more than its {experts:,} experts")
    if experts > 0:
        if used == 0:
            raise damaged(f"it has {experts:,} experts but uses none of them ({arch}.expert_used_count)")
        if groups >= experts:
            raise damaged(f"{arch}.expert_group_count is {groups:,} with only {experts:,} experts")
        if groups > 1 and (experts % groups or not 0 < groups_used < groups):
            raise damaged(
                f"its expert groups ({groups:,} groups, {groups_used:,} used, {experts:,} experts) do not fit"
            )
    elif groups:
        raise damaged(f"{arch}.expert_group_count is {groups:,} in a model without experts")
