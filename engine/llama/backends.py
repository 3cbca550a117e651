"""Which of llama.cpp's compute backends this process uses: the GPU if a working one is there, else the CPU.

A source install of llama-cpp-python links its backends in (CPU, or CPU plus CUDA/Metal/Vulkan):
they are registered when the library loads and there is nothing to choose. The bundle's build
uses llama.cpp's GGML_BACKEND_DL instead: each backend is a module loaded at run time, so a
machine without a Vulkan loader or driver still starts (the Vulkan module is simply not loaded).

Loading a GPU module runs the vendor's driver inside this process, and a broken driver can crash
it. So each GPU module is first loaded in a short-lived child process (`probe`); only if the child
lists its devices and exits cleanly is the module loaded here. A crash, a hang or no device means
the CPU, and a message saying why (`Backends.gpu_problem`).

SPECULA_DEVICE=cpu skips the GPU modules entirely. llama.cpp's Vulkan backend ignores CPU-type
Vulkan devices (lavapipe, a software renderer) unless GGML_VK_VISIBLE_DEVICES names one: the
tests do that to run everything through the real Vulkan backend on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import llama_cpp

from engine.llama import log as llama_log

# ggml_backend_dev_type
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator", 4: "meta"}
GPU_TYPES = (1, 2)
# Backend modules of a GGML_BACKEND_DL build that drive a GPU, with the name users know them by.
GPU_MODULES = {"vulkan": "Vulkan", "cuda": "CUDA", "hip": "HIP", "metal": "Metal", "sycl": "SYCL", "opencl": "OpenCL"}
PROBE_TIMEOUT_S = 30  # a driver that takes longer to list its devices is treated as broken
FORCE_CPU_ENV = "SPECULA_DEVICE"


@dataclass(frozen=True)
class Device:
    """One compute device as ggml lists it."""

    name: str  # ggml's name: "Vulkan0", "CUDA0", "CPU"
    description: str  # the hardware: "NVIDIA GeForce RTX 3060", "llvmpipe (LLVM 15.0.6, 256 bits)"
    kind: str  # DEVICE_TYPES value
    backend: str  # the backend's registry name: "Vulkan", "CUDA", "CPU"
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("GPU", "integrated GPU")


@dataclass(frozen=True)
class Backends:
    """What was loaded, the devices it offers, and why there is no GPU when there is none."""

    dynamic: bool  # a GGML_BACKEND_DL build (modules loaded at run time)
    devices: tuple[Device, ...] = ()
    gpu_problem: str = ""  # empty when a GPU is in use or none was ever possible
    modules: tuple[str, ...] = field(default=())  # module files loaded, for `engine info`

    @property
    def gpu(self) -> Device | None:
        return next((d for d in self.devices if d.is_gpu), None)

    def summary(self) -> str:
        """One line for users: the GPU and its memory, or the CPU and why."""
        gpu = self.gpu
        if gpu is not None:
            return f"{gpu.backend} · {gpu.description} · {gib(gpu.free_bytes)} free of {gib(gpu.total_bytes)}"
        return f"CPU · {self.gpu_problem}" if self.gpu_problem else "CPU"


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


_lock = threading.RLock()
_loaded: Backends | None = None
_cpu_modules: list[str] = []


def ensure_loaded() -> Backends:
    """Load the backends once per process (cheap after the first call) and say what is there.

    The first call may take a second or two (a GPU module is tried in a child process): not on a GUI thread.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def loaded() -> Backends | None:
    """What ensure_loaded() found, or None before it ran (never loads anything)."""
    return _loaded


def ensure_cpu() -> None:
    """Only the CPU backend, loaded in a few milliseconds (enough to ask it about CPU buffers)."""
    llama_log.install()  # ggml's messages about loading go to the log, not the terminal
    with _lock:
        if _loaded is None and not _cpu_modules and _registered() == 0:
            _cpu_modules.extend(_load_cpu())


def _registered() -> int:
    return ggml_function("ggml_backend_reg_count", ctypes.c_size_t, [])()


def _load_module(path: str) -> bool:
    """ggml_backend_load: registers the module's backend in llama.cpp's registry."""
    return bool(ggml_function("ggml_backend_load", ctypes.c_void_p, [ctypes.c_char_p])(os.fsencode(path)))


def _load_cpu() -> list[str]:
    loaded = [path for path in module_files("cpu") if _load_module(path)]
    if not loaded:
        raise OSError(f"llama.cpp's CPU backend could not be loaded from {library_folder()}")
    return loaded


def current() -> Backends:
    """The loaded backends with fresh memory figures (free VRAM changes as models load)."""
    loaded = ensure_loaded()
    return Backends(loaded.dynamic, tuple(list_devices()), loaded.gpu_problem, loaded.modules)


def _load() -> Backends:
    if not _cpu_modules and _registered() > 0:
        # Backends linked in: the library registered them itself.
        devices = tuple(list_devices())
        return Backends(False, devices, "" if any(d.is_gpu for d in devices) else _linked_in_problem())
    ensure_cpu()
    loaded, problems = list(_cpu_modules), []
    gpu_modules = [(name, path) for name in GPU_MODULES for path in module_files(name)]
    if os.environ.get(FORCE_CPU_ENV, "").lower() == "cpu":
        problems.append(f"the GPU is turned off ({FORCE_CPU_ENV}=cpu)")
        gpu_modules = []
    for name, path in gpu_modules:
        verdict = probe(path)
        if verdict.get("devices"):
            if _load_module(path):
                loaded.append(path)
                continue
            verdict = {"error": "it loaded in a test process but not here"}
        problems.append(_probe_problem(GPU_MODULES[name], verdict))
    devices = tuple(list_devices())
    problem = "" if any(d.is_gpu for d in devices) else "; ".join(problems) or "this llama.cpp has no GPU backend"
    return Backends(True, devices, problem, tuple(os.path.basename(p) for p in loaded))


def _linked_in_problem() -> str:
    """Why a build with linked-in backends has no GPU device: none built in, or none found."""
    get = ggml_function("ggml_backend_reg_get", ctypes.c_void_p, [ctypes.c_size_t])
    name = ggml_function("ggml_backend_reg_name", ctypes.c_char_p, [ctypes.c_void_p])
    gpu_backends = [name(get(i)).decode() for i in range(_registered())]
    gpu_backends = [b for b in gpu_backends if b not in ("CPU", "BLAS", "RPC")]
    if not gpu_backends:
        return "this llama.cpp was built for the CPU only"
    return f"no {' or '.join(gpu_backends)} GPU found"


def _probe_problem(backend: str, verdict: dict) -> str:
    if "crashed" in verdict:
        return f"the {backend} driver crashed while listing devices ({verdict['crashed']})"
    if "error" in verdict:
        return f"{backend} is not available: {verdict['error']}"
    return f"no {backend} GPU found"


def probe(module_path: str) -> dict:
    """Load a backend module in a child process and return what it found:
    {"devices": [...]} on success, {"error": ...} or {"crashed": ...} otherwise."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if getattr(sys, "frozen", False):
        env["PYINSTALLER_RESET_ENVIRONMENT"] = "1"  # a fresh start of the bundle, not a child of this one
    try:
        done = subprocess.run(
            probe_command(module_path), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        return {"crashed": f"no answer in {PROBE_TIMEOUT_S} s"}
    except OSError as e:
        return {"error": f"could not start the check: {e}"}
    if done.returncode < 0:
        return {"crashed": f"signal {-done.returncode}"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"error": f"the check failed: {last}"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "the check printed nothing readable"}


def probe_command(module_path: str) -> list[str]:
    if getattr(sys, "frozen", False):  # the bundle: its launcher answers --probe-backend
        return [sys.executable, "--probe-backend", module_path]
    return [sys.executable, "-m", "engine.llama.backends", module_path]


def probe_main(module_path: str) -> int:
    """In the child: load the module, list its devices as JSON on stdout."""
    if not _load_module(module_path):
        print(json.dumps({"error": _load_error(module_path)}))
        return 0
    devices = [d.__dict__ for d in list_devices() if d.is_gpu]
    print(json.dumps({"devices": devices} if devices else {}))
    return 0


def _load_error(module_path: str) -> str:
    """Why dlopen refused a module (a missing libvulkan.so.1, most often)."""
    try:
        ctypes.CDLL(module_path)
    except OSError as e:
        missing = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", str(e))
        return f"{missing.group(1)} is missing (install the GPU's driver)" if missing else str(e)
    return "no driver could be started (is the GPU's driver installed?)"


def list_devices() -> list[Device]:
    count = ggml_function("ggml_backend_dev_count", ctypes.c_size_t, [])()
    get = ggml_function("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t])
    name = ggml_function("ggml_backend_dev_name", ctypes.c_char_p, [ctypes.c_void_p])
    description = ggml_function("ggml_backend_dev_description", ctypes.c_char_p, [ctypes.c_void_p])
    kind = ggml_function("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p])
    size_p = ctypes.POINTER(ctypes.c_size_t)
    memory = ggml_function("ggml_backend_dev_memory", None, [ctypes.c_void_p, size_p, size_p])
    reg_of = ggml_function("ggml_backend_dev_backend_reg", ctypes.c_void_p, [ctypes.c_void_p])
    reg_name = ggml_function("ggml_backend_reg_name", ctypes.c_char_p, [ctypes.c_void_p])
    devices = []
    for i in range(count):
        dev = get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(
            Device(
                name=name(dev).decode(errors="replace"),
                description=description(dev).decode(errors="replace"),
                kind=DEVICE_TYPES.get(kind(dev), "unknown"),
                backend=reg_name(reg_of(dev)).decode(errors="replace"),
                free_bytes=free.value,
                total_bytes=total.value,
            )
        )
    return devices


def gpu_device_handles() -> list[int]:
    """ggml_backend_dev_t pointers of the GPU devices (for llama_model_params.devices)."""
    get = ggml_function("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t])
    kind = ggml_function("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p])
    count = ggml_function("ggml_backend_dev_count", ctypes.c_size_t, [])()
    return [get(i) for i in range(count) if kind(get(i)) in GPU_TYPES]


# -- llama-cpp-python's ggml libraries ------------------------------------------------------


def library_folder() -> str:
    """The folder llama-cpp-python loaded libllama from (its ggml libraries and modules lie beside it)."""
    loaded = getattr(getattr(llama_cpp.llama_cpp, "_lib", None), "_name", None)
    if not loaded:
        raise OSError("llama-cpp-python's library folder is unknown")
    return os.path.dirname(loaded)


def module_files(backend: str) -> list[str]:
    """The module file(s) of one backend in a GGML_BACKEND_DL build (libggml-vulkan.so...)."""
    pattern = re.compile(rf"^(lib)?ggml-{backend}(-[\w]+)?\.(so|dylib|dll)$")
    return sorted(p for p in glob.glob(os.path.join(library_folder(), "*ggml-*")) if pattern.match(os.path.basename(p)))


def ggml_function(name: str, restype, argtypes):
    """A function of ggml's core libraries (libggml-base, libggml) that llama-cpp-python loaded."""
    for lib in _ggml_libraries():
        function = getattr(lib, name, None)
        if function is not None:
            function.restype, function.argtypes = restype, argtypes
            return function
    raise OSError(f"{name} not found in llama-cpp-python's ggml libraries")


@functools.cache
def _ggml_libraries() -> list[ctypes.CDLL]:
    """libggml-base and libggml: the very files libllama loaded. A wheel cannot hold symlinks, so
    libggml.so and libggml.so.0 are two copies there; only the soname libllama asked for (.so.0)
    shares its backend registry with llama.cpp."""
    files = [os.path.basename(p) for p in glob.glob(os.path.join(library_folder(), "*ggml*"))]
    chosen = []
    for base in ("ggml-base", "ggml"):
        versioned = sorted(f for f in files if re.fullmatch(rf"lib{base}\.so\.\d+", f))
        plain = sorted(f for f in files if re.fullmatch(rf"(lib)?{base}\.(so|dylib|dll)", f))
        chosen += (versioned or plain)[:1]
    return [ctypes.CDLL(os.path.join(library_folder(), f)) for f in chosen]


if __name__ == "__main__":
    sys.exit(probe_main(sys.argv[1]))
