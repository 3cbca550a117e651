"""CPU weight buffers: llama.cpp's AMX path is never taken unless asked, and avoiding it keeps
llama.cpp's other repacked kernels.

The real-model checks run in subprocesses (tests/batched_decode.py): a native crash there is a
failed test with its signal and last lines, not a dead test run. On a machine without AMX the
forced AMX-free placement must match llama.cpp's own choice exactly; on one with AMX the
engine's decision must survive batched decodes at the machine's thread count.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.gguf.header import read_header
from engine.llama import cpu_weights
from engine.llama.runner import default_threads
from tests.batched_decode import WIDTHS
from tests.models import REPO

Q4_K = 12


def run_batched(path: str, placement: str, logits_file: Path | None = None) -> dict:
    extra = [str(logits_file)] if logits_file else []
    proc = subprocess.run(
        [sys.executable, "-m", "tests.batched_decode", path, placement, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        code = proc.returncode
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        last = "\n".join(proc.stderr.strip().splitlines()[-8:])
        pytest.fail(f"batched decoding of {path} ({placement}) died with {how}:\n{last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_batched_decodes_survive_the_engines_choice(smollm2_path, qwen_paths):
    # SmolLM2 is Q4_1 (AMX takes it, CPU_REPACK does not); the Qwen draft mixes Q4_K/Q5_0/Q8_0/Q6_K.
    for path in (smollm2_path, qwen_paths[1]):
        result = run_batched(path, "decided")
        assert sorted(map(int, result["argmax"])) == list(WIDTHS)
        assert [len(result["argmax"][str(w)]) for w in WIDTHS] == list(WIDTHS)
        assert result["threads"] == default_threads()
        if cpu_weights.AMX_BUFFER in cpu_weights.extra_buffer_types():
            assert "AMX off" in result["summary"] and "AMX" not in result["buffers"]


def test_avoiding_amx_keeps_llama_cpps_repacking(qwen_paths, tmp_path):
    target = qwen_paths[0]  # its Q4_K matrices are what CPU_REPACK takes on x86
    ours = run_batched(target, "without-amx", tmp_path / "ours.npz")
    plain = run_batched(target, "plain", tmp_path / "plain.npz")
    assert ours["repacked"] > 100
    assert ours["buffers"]["CPU_REPACK"] > 0
    assert "CPU_REPACK" not in plain["buffers"]
    if cpu_weights.AMX_BUFFER not in cpu_weights.extra_buffer_types():
        # Here llama.cpp's own choice is CPU_REPACK: ours must pick the very same tensors.
        default = run_batched(target, "decided")
        assert ours["buffers"] == default["buffers"]
        assert ours["logits"] == default["logits"]
    # Repacked kernels compute the same model but round differently (activations are quantized per
    # batch shape), as plain kernels do between batch widths: their argmax may differ where the top
    # two logits nearly tie, and nowhere else. Measured on an AVX-512 EPYC: every row's logits
    # within cosine 0.9975 of plain's; 13 of 131 argmaxes differ, each the plain row's 2nd or 3rd
    # token, behind by at most 1.94x the row's rounding noise (plain against itself between widths
    # 3 and 64: noise of the same size, one argmax flipped). A wrong layout would fail both checks.
    ours_rows, plain_rows = np.load(tmp_path / "ours.npz"), np.load(tmp_path / "plain.npz")
    for width in WIDTHS:
        for row, (mine, theirs) in enumerate(zip(ours_rows[f"w{width}"], plain_rows[f"w{width}"], strict=True)):
            assert mine.shape == theirs.shape
            cosine = float(mine @ theirs / np.linalg.norm(mine) / np.linalg.norm(theirs))
            assert cosine > 0.99, f"width {width}, row {row}: repacked logits are not plain's (cosine {cosine:.4f})"
            picked, best = int(mine.argmax()), int(theirs.argmax())
            if picked == best:
                continue
            noise = float(np.sqrt(np.mean((mine - theirs) ** 2)))
            gap, rank = float(theirs[best] - theirs[picked]), int((theirs > theirs[picked]).sum()) + 1
            assert rank <= 3 and gap <= 5 * noise, (
                f"width {width}, row {row}: repacked argmax {picked} is plain's #{rank}, "
                f"{gap:.3f} behind (rounding noise {noise:.3f}): not a near-tie"
            )


@pytest.fixture
def amx_offered(monkeypatch):
    """A machine where llama.cpp would put weights in its AMX buffer (what extra_buffer_types reports)."""
    monkeypatch.setattr(cpu_weights, "offered_buffers", lambda: {"AMX": 1, "CPU_REPACK": 2})


def test_amx_is_avoided_unless_allowed(amx_offered, qwen_paths):
    header = read_header(qwen_paths[0])
    placement = cpu_weights.plan(header.tensors, header.n_layers, 0, allow_amx=False)
    assert not placement.use_extra_buffers and placement.amx == "avoided"
    chosen = set(placement.repack)
    layer_matrix = re.compile(r"blk\.\d+\.(attn_(q|k|v|output)|ffn_(up|gate|down))\.weight")
    assert chosen and all(layer_matrix.fullmatch(name) for name in chosen)
    by_name = {t.name: t for t in header.tensors}
    assert all(by_name[n].ttype == Q4_K and by_name[n].dims[1] % 8 == 0 for n in chosen)
    # Every Q4_K layer matrix is taken: the embedding (GET_ROWS) and the Q6_K/Q8_0 ones are not.
    expected = {t.name for t in header.tensors if t.ttype == Q4_K and layer_matrix.fullmatch(t.name)}
    assert chosen == expected
    assert "token_embd.weight" not in chosen

    allowed = cpu_weights.plan(header.tensors, header.n_layers, 0, allow_amx=True)
    assert allowed.use_extra_buffers and allowed.amx == "on" and "may crash" in allowed.summary


def test_without_amx_nothing_changes(monkeypatch, qwen_paths):
    monkeypatch.setattr(cpu_weights, "offered_buffers", lambda: {"CPU_REPACK": 2})
    header = read_header(qwen_paths[0])
    for allow in (False, True):
        placement = cpu_weights.plan(header.tensors, header.n_layers, 0, allow_amx=allow)
        assert placement.use_extra_buffers and placement.amx == "none" and not placement.repack


def test_layers_offloaded_to_a_gpu_are_not_pinned_to_the_cpu(amx_offered, monkeypatch, qwen_paths):
    monkeypatch.setattr(cpu_weights.llama_cpp, "llama_supports_gpu_offload", lambda: True)
    monkeypatch.setattr(cpu_weights.backends, "gpu_device_handles", lambda: [1])  # one GPU device
    header = read_header(qwen_paths[0])
    n = header.n_layers
    # llama.cpp puts the last 10 of the n + 1 layers (the output layer last) on the GPU.
    layers = {int(m.group(1)) for m in map(re.compile(r"blk\.(\d+)\.").match, cpu_weights.plan(
        header.tensors, n, 10, allow_amx=False).repack) if m}  # fmt: skip
    assert layers and max(layers) == n + 1 - 10 - 1
    assert cpu_weights.plan(header.tensors, n, -1, allow_amx=False).repack == ()


def test_llama_cpp_pythons_own_loads_take_the_engines_placement(qwen_paths):
    """What the benchmark's anchor and the llama-cpp-python server in the tests rely on (they have no
    setting for buffer types): a Llama loaded inside llama_cpp_python_placed gets the placement."""
    import llama_cpp.llama_cpp as low
    from llama_cpp import Llama

    from engine.llama import log as llama_log

    draft = qwen_paths[1]  # Q4_K matrices: CPU_REPACK takes them on every x86 CPU with AVX2
    header = read_header(draft)
    defaults = low.llama_model_default_params
    llama_log.install()
    for placement, repacked in (
        (cpu_weights.without_amx(header.tensors, header.n_layers, 0), True),
        (cpu_weights.WeightPlacement(False, summary="extra buffers off"), False),
    ):
        at = llama_log.mark()
        with cpu_weights.llama_cpp_python_placed(placement):
            llm = Llama(draft, n_ctx=256, n_threads=1, verbose=False)
        sizes = llama_log.buffer_sizes(at)
        llm.close()
        assert ("CPU_REPACK" in sizes) is repacked and "AMX" not in sizes, (placement.summary, sizes)
    assert low.llama_model_default_params is defaults  # nothing loaded afterwards is affected
