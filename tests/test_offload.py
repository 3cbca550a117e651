"""Where auto puts the layers (engine/llama/offload.py), from the real models' GGUF headers and given free memory."""

import pytest

from engine.config import GPU_LAYERS_ALL, GPU_LAYERS_AUTO
from engine.gguf.header import read_header
from engine.llama import offload

AUTO = GPU_LAYERS_AUTO
GiB = 1 << 30


@pytest.fixture(scope="module")
def costs(smollm2_path, qwen_paths):
    target, draft = qwen_paths
    return {
        "qwen1.5b": offload.layer_costs(read_header(target), 4096),
        "qwen0.5b": offload.layer_costs(read_header(draft), 4096),
        "smollm2": offload.layer_costs(read_header(smollm2_path), 4096),
    }


def free_for(needed: int) -> int:
    """Free memory that leaves exactly `needed` after the reserve."""
    return int(max(needed / (1 - offload.RESERVE_SHARE), needed + offload.RESERVE_MIN)) + 1


def test_layer_costs_add_up_to_the_weights_and_the_kv_cache(costs, qwen_paths):
    header = read_header(qwen_paths[0])
    c = costs["qwen1.5b"]
    weights = sum(t.n_bytes for t in header.tensors if t.name != "token_embd.weight")
    if not any(t.name == "output.weight" for t in header.tensors):  # tied: the embedding is copied to the GPU
        weights += next(t.n_bytes for t in header.tensors if t.name == "token_embd.weight")
    kv = header.kv_bytes_per_token() * 4096
    assert c.n_layers == header.n_layers
    # All offloaded: the weights (the input embedding stays on the CPU), the KV cache, the buffers.
    assert c.bytes_for(GPU_LAYERS_ALL) == pytest.approx(weights + kv + c.compute, rel=0.01)
    assert c.bytes_for(0) == 0 and c.bytes_for(1) == c.compute + c.output


def test_without_a_gpu_nothing_is_offloaded(costs):
    assert offload.plan(costs["qwen1.5b"], AUTO, costs["qwen0.5b"], AUTO, None) == offload.Offload(0, 0)


def test_both_go_wholly_to_a_gpu_with_room(costs):
    t, d = costs["qwen1.5b"], costs["qwen0.5b"]
    placed = offload.plan(t, AUTO, d, AUTO, 24 * GiB)
    assert (placed.target_layers, placed.draft_layers, placed.note) == (t.all_layers, d.all_layers, "")


def test_a_small_draft_goes_first_and_the_target_gets_the_rest(costs):
    t, d = costs["qwen1.5b"], costs["smollm2"]  # a draft under a third of the target's size
    free = free_for(d.bytes_for(GPU_LAYERS_ALL) + t.bytes_for(t.all_layers // 2))
    placed = offload.plan(t, AUTO, d, AUTO, free)
    assert placed.draft_layers == d.all_layers
    assert t.all_layers // 2 <= placed.target_layers < t.all_layers
    assert placed.note.startswith(f"target {placed.target_layers}/{t.all_layers} layers on the GPU")


def test_a_large_draft_waits_for_the_target(costs):
    t, d = costs["qwen1.5b"], costs["qwen0.5b"]  # 0.5B beside 1.5B: more than a third
    placed = offload.plan(t, AUTO, d, AUTO, free_for(t.bytes_for(GPU_LAYERS_ALL) + d.bytes_for(3)))
    assert placed.target_layers == t.all_layers
    assert placed.draft_layers == 3 and "draft 3/" in placed.note


def test_explicit_counts_are_kept_and_auto_fits_around_them(costs):
    t, d = costs["qwen1.5b"], costs["smollm2"]
    placed = offload.plan(t, 10, d, AUTO, free_for(t.bytes_for(10) + d.bytes_for(GPU_LAYERS_ALL)))
    assert (placed.target_layers, placed.draft_layers) == (10, d.all_layers)
    assert offload.plan(t, GPU_LAYERS_ALL, d, 0, 1 * GiB).target_layers == t.all_layers  # asked for: tried


def test_out_of_gpu_memory_at_load_retries_with_half_the_layers_and_says_so(monkeypatch, smollm2_path):
    """The retry loop, at the runner seam: a GPU that cannot hold more than 8 layers. (lavapipe, the
    software device CI has, maps the model's memory instead of allocating and never runs out.)"""
    from engine.config import ModelSpec
    from engine.decoding import chat_engine as engine_module
    from engine.errors import ModelLoadError
    from engine.llama import backends

    tried = []
    real_runner = engine_module.ModelRunner

    def runner(spec, progress=None):
        tried.append(spec.n_gpu_layers)
        if spec.n_gpu_layers == GPU_LAYERS_ALL or spec.n_gpu_layers > 8:
            error = ModelLoadError("Could not load SmolLM2: unable to allocate Vulkan0 buffer.")
            error.out_of_memory = True
            raise error
        return real_runner(spec.with_(n_gpu_layers=0), progress)  # no GPU here: what fits loads on the CPU

    gpu = backends.Device("Vulkan0", "A small GPU", "GPU", "Vulkan", 1 << 30, 1 << 30)
    monkeypatch.setattr(engine_module, "ModelRunner", runner)
    monkeypatch.setattr(backends, "ensure_loaded", lambda: backends.Backends(True, (gpu,)))
    notes: list[str] = []
    loaded = engine_module._load(
        ModelSpec(smollm2_path, n_ctx=512, n_gpu_layers=GPU_LAYERS_ALL), None, lambda: False, notes
    )
    try:
        assert tried == [GPU_LAYERS_ALL, 15, 7]  # all (31), then halves
        assert (
            len(notes) == 1
            and "the GPU ran out of memory" in notes[0]
            and notes[0].startswith(smollm2_path.split("/")[-1])
        )
    finally:
        loaded.close()
