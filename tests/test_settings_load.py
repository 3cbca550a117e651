"""settings.json as a user (or a crash, or an editor) may leave it: every field checked, nothing lost."""

from __future__ import annotations

import json
import math

import pytest

from app.core.settings import RANGES, VERSION, ModelSettings, Settings
from engine.config import GPU_LAYERS_AUTO


def write(path, data) -> None:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("context_size", -5, 512),
        ("context_size", 10**12, 262_144),
        ("context_size", 1e12, Settings().context_size),  # not an integer: the default
        ("top_p", 5, 1.0),
        ("top_p", -0.5, 0.0),
        ("temperature", float("nan"), Settings().temperature),
        ("temperature", float("inf"), Settings().temperature),
        ("temperature", 9, 2.0),
        ("draft_length", 99, 16),
        ("top_k", -1, 0),
        ("min_p", 3.0, 1.0),
        ("max_tokens", 0, 1),
        ("seed", -7, -1),
        ("drafter_mode", "warp", Settings().drafter_mode),
    ],
)
def test_out_of_range_values_are_clamped_or_fall_back_and_the_user_is_told(tmp_path, field, value, expected):
    path = tmp_path / "settings.json"
    # json.dumps writes NaN and Infinity as Python's json reads them back (as a hand edit could).
    write(path, {"target": {"path": "/m/t.gguf"}, field: value})
    loaded = Settings.load(path)
    assert getattr(loaded, field) == expected
    assert not (isinstance(expected, float) and math.isnan(getattr(loaded, field)))
    assert len(loaded.load_notices) == 1 and field in loaded.load_notices[0] and str(path) in loaded.load_notices[0]
    assert loaded.target.path == "/m/t.gguf" and not loaded.model_choice_lost


def test_model_placement_is_checked_too(tmp_path):
    path = tmp_path / "settings.json"
    write(path, {"target": {"path": "/m/t.gguf", "threads": -3, "gpu_layers": -9}, "draft": {"gpu_layers": 5000}})
    loaded = Settings.load(path)
    assert loaded.target == ModelSettings("/m/t.gguf", gpu_layers=GPU_LAYERS_AUTO, threads=0)
    assert loaded.draft.gpu_layers == RANGES["gpu_layers"][1]
    notice = loaded.load_notices[0]
    assert "target.threads" in notice and "target.gpu_layers" in notice and "draft.gpu_layers" in notice


def test_gpu_layers_of_0_from_before_the_gpu_build_mean_auto(tmp_path):
    # Version 1 files (no "version") hold 0 because it was the default of an app that never used a GPU.
    path = tmp_path / "settings.json"
    write(path, {"target": {"path": "/m/t.gguf", "gpu_layers": 0}, "draft": {"path": "/m/d.gguf", "gpu_layers": 7}})
    loaded = Settings.load(path)
    assert (loaded.target.gpu_layers, loaded.draft.gpu_layers, loaded.version) == (GPU_LAYERS_AUTO, 7, VERSION)
    assert list(loaded.load_notices) == []
    # Saved again, a 0 chosen now means the CPU only.
    loaded.target.gpu_layers = 0
    loaded.save(path)
    assert Settings.load(path).target.gpu_layers == 0


def test_valid_settings_load_silently(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(target=ModelSettings("/m/t.gguf", gpu_layers=-1, threads=4), temperature=0.0, draft_length=16)
    s.save(path)
    loaded = Settings.load(path)
    assert loaded == s and list(loaded.load_notices) == [] and not loaded.model_choice_lost


def test_a_file_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"target": {"path": "/m/t.gguf"}, "top_k": 12}).encode())
    loaded = Settings.load(path)
    assert loaded.target.path == "/m/t.gguf" and loaded.top_k == 12 and list(loaded.load_notices) == []
    assert path.exists() and not list(tmp_path.glob("*.damaged-*"))


@pytest.mark.parametrize(
    "content",
    ['{"target": {"path": "/m/my-model.gguf"}', "[1, 2, 3]", "", b"\xff\xfe garbage \x00".decode("latin-1")],
    ids=["cut short", "not an object", "empty", "not utf-8"],
)
def test_an_unreadable_file_is_moved_aside_never_overwritten_and_the_user_is_told(tmp_path, content):
    path = tmp_path / "settings.json"
    path.write_bytes(content.encode("latin-1"))
    earlier = tmp_path / "settings.json.damaged-earlier"
    earlier.write_text("an older damaged copy")

    loaded = Settings.load(path)

    assert loaded == Settings() and loaded.model_choice_lost
    assert not path.exists()
    kept = [p for p in tmp_path.glob("settings.json.damaged-*") if p != earlier]
    assert len(kept) == 1 and kept[0].read_bytes() == content.encode("latin-1")
    assert earlier.read_text() == "an older damaged copy"
    assert kept[0].name in loaded.load_notices[0] and "no model is chosen" in loaded.load_notices[0]
    loaded.save(path)  # the next save writes a new file; the kept one stays as it was
    assert kept[0].read_bytes() == content.encode("latin-1")


def test_two_damaged_files_in_the_same_second_are_both_kept(tmp_path):
    path = tmp_path / "settings.json"
    for text in ("{first", "{second"):
        path.write_text(text)
        Settings.load(path)
    kept = sorted(p.read_text() for p in tmp_path.glob("settings.json.damaged-*"))
    assert kept == ["{first", "{second"]


def test_an_unusable_model_entry_counts_as_a_lost_choice(tmp_path):
    path = tmp_path / "settings.json"
    write(path, {"target": "/m/t.gguf"})
    loaded = Settings.load(path)
    assert loaded.target.path == "" and loaded.model_choice_lost
    assert "target" in loaded.load_notices[0]
