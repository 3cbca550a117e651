"""Where llama.cpp keeps a model's weights on the CPU: never in its AMX buffer while that crashes.

llama.cpp repacks CPU weights into "extra" buffer types with faster kernels: AMX on Xeons that
have it, CPU_REPACK (interleaved layouts for AVX2/AVX-512) elsewhere. Its AMX matrix multiply
crashes on decodes of 2+ tokens with several threads (llama.cpp issue #20824), and every
speculative verification is such a decode. llama.cpp has no switch for AMX alone, so where it
would use AMX the engine turns the extra buffer types off and hands CPU_REPACK back tensor by
tensor, by the rules llama.cpp itself uses to choose it (ggml-cpu/repack.cpp). Everything else
keeps llama.cpp's defaults.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import llama_cpp

from engine.llama import backends
from engine.llama.backends import ggml_function

AMX_ISSUE = "llama.cpp issue #20824"
AMX_BUFFER, REPACK_BUFFER = "AMX", "CPU_REPACK"

# ggml tensor types that CPU_REPACK takes on x86, and the CPU feature each needs
# (ggml_repack_get_optimal_repack_type in the vendored llama.cpp). The row count must be a
# multiple of 8 for all of them. Only x86 matters here: AMX exists only there.
_REPACK_X86 = {2: "AVX2", 12: "AVX2", 20: "AVX2", 39: "AVX2", 10: "AVX512"}  # Q4_0 Q4_K IQ4_NL MXFP4 Q2_K

# Weights llama.cpp multiplies with MUL_MAT (2-D) or MUL_MAT_ID (3-D experts) (LLM_TENSOR_INFOS):
# the only ones a repacked layout serves. Embeddings (GET_ROWS), norms and biases stay plain.
_MATMUL_2D = ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
              "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")  # fmt: skip
_MATMUL_3D = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


@dataclass(frozen=True)
class WeightPlacement:
    """What the engine tells llama.cpp about CPU weight buffers, and why (one line for users)."""

    use_extra_buffers: bool  # llama.cpp's own choice (AMX / CPU_REPACK) when True
    repack: tuple[str, ...] = ()  # with extra buffers off: tensors put back into CPU_REPACK
    amx: str = "none"  # "none" (llama.cpp would not use AMX here), "avoided" or "on"
    summary: str = ""


def cpu_features() -> dict[str, str]:
    """The CPU backend's compiled-in features as llama.cpp reports them ("AVX2" -> "1")."""
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    return dict(re.findall(r"(\w+) = (\w+)", info))


def offered_buffers() -> dict[str, int]:
    """extra_buffer_types(), or where ggml's libraries cannot be asked, what llama.cpp's feature
    report implies (no buffer pointers then: AMX is avoided by turning extra buffers off)."""
    try:
        return extra_buffer_types()
    except OSError:
        return {AMX_BUFFER: 0} if cpu_features().get("AMX_INT8") == "1" else {REPACK_BUFFER: 0}


def plan(tensors: Iterable, n_layers: int, n_gpu_layers: int, allow_amx: bool) -> WeightPlacement:
    """Decide the CPU weight buffers for a model about to be loaded.

    tensors: the GGUF header's tensor table (name, dims, ttype); n_gpu_layers as in ModelSpec.
    """
    offered = offered_buffers()
    if AMX_BUFFER not in offered:
        how = "repacked for this CPU by llama.cpp" if REPACK_BUFFER in offered else "llama.cpp's plain layout"
        return WeightPlacement(True, summary=f"CPU weights: {how} (no AMX on this machine)")
    if allow_amx:
        return WeightPlacement(
            True, amx="on", summary=f"CPU weights: AMX on, as asked (batched decoding may crash: {AMX_ISSUE})"
        )
    if not offered.get(REPACK_BUFFER):
        return WeightPlacement(False, amx="avoided", summary=f"CPU weights: AMX off ({AMX_ISSUE}), plain layout")
    return without_amx(tensors, n_layers, n_gpu_layers)


def without_amx(tensors: Iterable, n_layers: int, n_gpu_layers: int) -> WeightPlacement:
    """Extra buffers off, and CPU_REPACK given back to each tensor that llama.cpp would repack."""
    features = cpu_features()
    on_cpu = _layers_on_cpu(n_layers, n_gpu_layers)
    chosen = tuple(t.name for t in tensors if _repackable(t, features) and _layer_of(t.name, n_layers) < on_cpu)
    summary = f"CPU weights: AMX off ({AMX_ISSUE}); {len(chosen)} tensors repacked for AVX2/AVX-512 instead"
    return WeightPlacement(False, chosen, amx="avoided", summary=summary)


def _repackable(tensor, features: dict[str, str]) -> bool:
    needs = _REPACK_X86.get(tensor.ttype)
    if needs is None or features.get(needs) != "1" or len(tensor.dims) < 2 or tensor.dims[1] % 8:
        return False
    if tensor.name == "output.weight":
        return len(tensor.dims) == 2
    m = _LAYER_TENSOR.fullmatch(tensor.name)
    if not m:
        return False
    kind = m.group(2)
    return (kind in _MATMUL_2D and len(tensor.dims) == 2) or (kind in _MATMUL_3D and len(tensor.dims) == 3)


def _layers_on_cpu(n_layers: int, n_gpu_layers: int) -> int:
    """How many layers, counted from the first, llama.cpp keeps on the CPU (the output layer is
    layer n_layers): its load_tensors sends the last n_gpu_layers of the n_layers + 1 to a GPU."""
    if n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload() or not backends.gpu_device_handles():
        return n_layers + 1
    requested = n_layers + 1 if n_gpu_layers < 0 else n_gpu_layers
    return max(n_layers + 1 - requested, 0)


def _layer_of(name: str, n_layers: int) -> int:
    m = _LAYER_TENSOR.fullmatch(name)
    return int(m.group(1)) if m else n_layers  # output.weight belongs to the output layer


def apply(placement: WeightPlacement, mparams) -> object:
    """Set placement on llama_model_params; returns what must stay alive until the load ends."""
    mparams.use_extra_bufts = placement.use_extra_buffers
    if placement.use_extra_buffers or not placement.repack:
        return None
    buffer = extra_buffer_types()[REPACK_BUFFER]
    # One exact-name pattern per tensor, joined: llama.cpp compiles each pattern once per tensor.
    pattern = "^(" + "|".join(re.escape(name) for name in placement.repack) + ")$"
    keep = (pattern.encode(), (llama_model_tensor_buft_override * 2)())
    keep[1][0].pattern = keep[0]
    keep[1][0].buft = buffer
    mparams.tensor_buft_overrides = ctypes.cast(keep[1], ctypes.c_void_p)
    return keep


@contextlib.contextmanager
def llama_cpp_python_placed(placement: WeightPlacement) -> Iterator[None]:
    """llama-cpp-python's own Llama (the benchmark's anchor, its OpenAI server in the tests) builds its
    model parameters itself and has no argument for buffer types: while this is open, every model it
    loads gets placement through the defaults it reads (llama-server's --no-repack has no equivalent)."""
    import llama_cpp.llama_cpp as low

    original, keep = low.llama_model_default_params, []

    def placed():
        params = original()
        keep.append(apply(placement, params))
        return params

    low.llama_model_default_params = placed
    try:
        yield
    finally:
        low.llama_model_default_params = original


class llama_model_tensor_buft_override(ctypes.Structure):  # noqa: N801 - llama.h's name
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


# -- what this llama.cpp build offers, asked through ggml's backend registry -------------------


@functools.cache
def extra_buffer_types() -> dict[str, int]:
    """The CPU device's extra buffer types by name ("AMX", "CPU_REPACK"), as llama.cpp would use them."""
    backends.ensure_cpu()
    dev = ggml_function("ggml_backend_dev_by_type", ctypes.c_void_p, [ctypes.c_int])(0)  # the CPU device
    if not dev:
        return {}
    reg = ggml_function("ggml_backend_dev_backend_reg", ctypes.c_void_p, [ctypes.c_void_p])(dev)
    get_proc = ggml_function("ggml_backend_reg_get_proc_address", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p])
    address = get_proc(reg, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return {}
    get_extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)
    name_of = ggml_function("ggml_backend_buft_name", ctypes.c_char_p, [ctypes.c_void_p])
    found, bufts = {}, get_extra(dev)
    for i in range(64):
        if not bufts or not bufts[i]:
            break
        found[name_of(bufts[i]).decode()] = bufts[i]
    return found
