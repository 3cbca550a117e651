"""The engine on a real GPU backend: llama.cpp's Vulkan backend, on whatever Vulkan device is there.

Machines without a GPU run it on lavapipe, Mesa's software Vulkan device, which llama.cpp uses only
when GGML_VK_VISIBLE_DEVICES names it. These tests need a llama-cpp-python built with Vulkan
(packaging/build-llama-vulkan.sh); .ci/run builds it after the main suite and runs this file with
SPECULA_VULKAN_TEST=1 GGML_VK_VISIBLE_DEVICES=0, where a missing device is a failure, not a skip.
Everything here runs through the device: weights, KV cache, logits read back, rejected drafts
rolled back in the device's KV cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from engine.config import GPU_LAYERS_ALL, ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, FinishReason, TokenEvent
from engine.llama import backends
from tests.models import REPO
from tests.test_adaptive import assert_auto_drafts_with_the_draft_model_at_gpu_costs

REQUIRED = os.environ.get("SPECULA_VULKAN_TEST") == "1"
# lavapipe decodes a token of SmolLM2 in about 2 s on 2 cores: short answers, one engine for most tests.
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
DRAFT4 = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4)
COPY = [ChatMessage("user", "Repeat exactly: the quick brown fox.")]
QUESTION = [ChatMessage("user", "Name a sea animal.")]


def vulkan_gpu():
    gpu = backends.ensure_loaded().gpu
    return gpu if gpu is not None and gpu.backend == "Vulkan" else None


@pytest.fixture(scope="module")
def device():
    gpu = vulkan_gpu()
    if gpu is None:
        why = backends.ensure_loaded().gpu_problem or "no Vulkan device"
        if REQUIRED:
            pytest.fail(f"SPECULA_VULKAN_TEST=1 but the engine found no Vulkan device: {why}")
        pytest.skip(f"no Vulkan device ({why}); GGML_VK_VISIBLE_DEVICES=0 uses lavapipe on a Vulkan build")
    return gpu


@pytest.fixture(scope="module")
def gpu_engine(device, smollm2_path):
    """SmolLM2 as its own draft, GPU layers "auto" (the default): both fit, so both are wholly on the device."""
    spec = ModelSpec(smollm2_path, n_ctx=1024)
    engine = Engine(spec, spec)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def plain_copy(gpu_engine) -> DoneEvent:
    return answer(gpu_engine, COPY, SpecParams(mode=DrafterMode.OFF))


@pytest.fixture(scope="module")
def drafted_copy(gpu_engine) -> DoneEvent:
    return answer(gpu_engine, COPY, DRAFT4)


def answer(engine, messages, spec=SpecParams(), sampling=GREEDY, cancel=None, stop_after=None) -> DoneEvent:
    n = 0
    for event in engine.chat(messages, sampling, spec, cancel):
        if isinstance(event, TokenEvent):
            n += 1
            if stop_after is not None and n >= stop_after:
                cancel.set()
        if isinstance(event, DoneEvent):
            return event
    raise AssertionError("no DoneEvent")


def test_auto_puts_both_models_wholly_on_the_device_and_the_engine_says_so(gpu_engine, device):
    info = gpu_engine.info
    assert info.backend == "Vulkan" and info.device == device.description
    assert info.target_gpu_layers == info.target_layers + 1  # every block and the output layer
    assert info.draft_gpu_layers == info.draft_layers + 1
    assert info.gpu_note == "" and 0 < info.vram_free <= info.vram_total
    assert info.placement().startswith(f"Vulkan ({device.description}), 31/31 layers on GPU (draft 31/31)")


def test_greedy_speculation_with_the_draft_model_on_the_device_gives_the_plain_text(plain_copy, drafted_copy):
    assert drafted_copy.text == plain_copy.text and plain_copy.text.strip()
    # Drafts were verified on the device and some kept; rejected ones were rolled back in its KV cache.
    assert drafted_copy.stats.n_accepted > 0


def test_greedy_speculation_with_prompt_lookup_on_the_device_gives_the_plain_text(gpu_engine, plain_copy):
    looked_up = answer(gpu_engine, COPY, SpecParams(mode=DrafterMode.LOOKUP))
    assert looked_up.text == plain_copy.text


def test_sampled_speculation_on_the_device_repeats_with_a_seed(gpu_engine):
    sampling = SamplingParams(temperature=0.8, seed=7, max_tokens=6)
    fixed = DRAFT4.with_(draft_p_min=0.0)  # no timing-driven draft cuts (see test_engine's seed test)
    first = answer(gpu_engine, QUESTION, fixed, sampling)
    second = answer(gpu_engine, QUESTION, fixed, sampling)
    assert first.text == second.text and first.stats.n_drafted > 0


def test_a_cancelled_answer_leaves_the_device_cache_consistent(gpu_engine, drafted_copy):
    cut = answer(gpu_engine, QUESTION, DRAFT4, cancel=threading.Event(), stop_after=2)
    assert cut.finish_reason == FinishReason.CANCELLED
    # The next answer keeps the cached prefix it shares with the cut one and rolls back the rest.
    assert answer(gpu_engine, COPY, DRAFT4).text == drafted_copy.text


def test_auto_drafts_with_the_draft_model_at_gpu_shaped_costs(gpu_engine):
    assert_auto_drafts_with_the_draft_model_at_gpu_costs(gpu_engine, GREEDY)


def test_target_on_the_device_with_the_draft_on_the_cpu(device, smollm2_path, plain_copy):
    target = ModelSpec(smollm2_path, n_ctx=1024, n_gpu_layers=GPU_LAYERS_ALL)
    engine = Engine(target, target.with_(n_gpu_layers=0))
    try:
        info = engine.info
        assert (info.target_gpu_layers, info.draft_gpu_layers) == (info.target_layers + 1, 0)
        drafted = answer(engine, COPY, DRAFT4)
        assert drafted.text == plain_copy.text and drafted.stats.n_accepted > 0
    finally:
        engine.close()


# -- without a working Vulkan driver: the CPU, and a message ------------------------------------

CRASHING_DRIVER = """
#include <stdlib.h>
/* A Vulkan driver (ICD) that kills its process as soon as the loader talks to it. */
int vk_icdNegotiateLoaderICDInterfaceVersion(unsigned *version) { abort(); }
void *vk_icdGetInstanceProcAddr(void *instance, const char *name) { abort(); }
"""


def run_engine(smollm2_path, env_changes: dict, gpu_layers: int = -2) -> subprocess.CompletedProcess:
    """`engine info` and a short answer in a fresh process (backends are loaded once per process)."""
    env = {**os.environ, **env_changes}
    script = textwrap.dedent(
        f"""
        from engine.config import ChatMessage, ModelSpec, SamplingParams
        from engine.decoding.chat_engine import Engine
        engine = Engine(ModelSpec({smollm2_path!r}, n_ctx=1024, n_gpu_layers={gpu_layers}))
        done = list(engine.chat([ChatMessage("user", "Hi")], SamplingParams(temperature=0, max_tokens=8)))[-1]
        print("PLACEMENT", engine.info.placement())
        print("TOKENS", done.stats.n_tokens)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_no_vulkan_driver_means_the_cpu_and_a_message(device, smollm2_path, tmp_path):
    missing = tmp_path / "no-such-driver.json"
    done = run_engine(smollm2_path, {"VK_ICD_FILENAMES": str(missing), "VK_DRIVER_FILES": str(missing)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PLACEMENT CPU (Vulkan is not available: no driver could be started" in done.stdout
    assert answered(done) > 0


def test_a_crashing_vulkan_driver_means_the_cpu_not_a_crash(device, smollm2_path, tmp_path):
    source = tmp_path / "crash.c"
    source.write_text(CRASHING_DRIVER)
    library = tmp_path / "libcrashing_icd.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    manifest = tmp_path / "crashing_icd.json"
    manifest.write_text(
        f'{{"file_format_version": "1.0.0", "ICD": {{"library_path": "{library}", "api_version": "1.3.0"}}}}'
    )
    done = run_engine(smollm2_path, {"VK_ICD_FILENAMES": str(manifest), "VK_DRIVER_FILES": str(manifest)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PLACEMENT CPU (the Vulkan driver crashed while listing devices (signal 6))" in done.stdout
    assert answered(done) > 0


def answered(done: subprocess.CompletedProcess) -> int:
    return int(done.stdout.split("TOKENS", 1)[1].split()[0])
