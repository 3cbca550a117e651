"""Damaged copies of a real model through the engine's load path, the library and the CLI.

Every copy (tests/gguf_damage.py: empty, random, truncated, huge counts, bad tensors, bad
alignment, out-of-range layer counts, nested arrays, seeded byte flips) is loaded by the Engine
in a child process, so a native crash or a hang is a failure naming the file, not a dead run.
Each must end in a message that names the file and says what is wrong.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.library import ModelLibrary
from tests import gguf_damage
from tests.bad_files import load_each
from tests.models import REPO

BATCH = 12  # damaged copies on disk at once (each is ~100 MB: the real tensor data follows the header)
MEMORY_ADVICE = "Try fewer GPU layers"


@pytest.fixture(scope="module")
def outcomes(smollm2_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("damaged")
    src = Path(smollm2_path)
    layout = gguf_damage.read_layout(src)
    damages = gguf_damage.catalogue(src)
    results = []
    for start in range(0, len(damages), BATCH):
        made = []
        for damage in damages[start : start + BATCH]:
            dest = folder / damage.filename
            damage.make(src, dest, layout)
            made.append((damage, dest))
        by_path = load_each([str(p) for _d, p in made])
        results += [(damage, by_path[str(path)]) for damage, path in made]
        gguf_damage.remove_all(made)
    return results


def test_no_damaged_file_crashes_or_hangs_the_engine(outcomes):
    bad = [(d.name, o.status, o.message[:300]) for d, o in outcomes if o.status in ("crash", "hang", "exception")]
    assert not bad


def test_every_damaged_file_gets_a_message_naming_it_and_the_problem(outcomes):
    for damage, outcome in outcomes:
        if outcome.status == "loaded":
            # Only a flipped byte somewhere harmless (a token's text, a float) may leave a loadable model.
            assert damage.kind == "random byte flips in the header", damage.name
            continue
        message = outcome.message
        assert damage.filename in message, (damage.name, message)
        assert damage.expect in message, (damage.name, message)
        assert MEMORY_ADVICE not in message, (damage.name, message)
        assert "Traceback" not in message and "Error:" not in message, (damage.name, message)
        # llama.cpp's model description ("print_info: rope_finetuned = unknown", "- kv 29: ...unknown_token_id")
        # is not a reason, even where it says "unknown".
        assert not any(s in message for s in ("print_info", "llama_model_loader", "= unknown")), (damage.name, message)
        if damage.kind != "truncated" and not damage.kind.startswith("random"):
            # A complete file with a wrong value is damaged, not an unfinished download.
            assert "incomplete (truncated)" not in message and "cut off" not in message, (damage.name, message)
    _print_table(outcomes)


def _print_table(outcomes) -> None:
    rows = collections.defaultdict(collections.Counter)
    for damage, outcome in outcomes:
        row = rows[damage.kind]
        row["tried"] += 1
        row["clear message" if outcome.status == "error" else outcome.status] += 1
    print("\nclass | tried | clear message | loaded fine | crashes | hangs")
    for kind, row in rows.items():
        print(f"{kind} | {row['tried']} | {row['clear message']} | {row['loaded']} | {row['crash']} | {row['hang']}")


def test_the_library_lists_each_damaged_file_with_its_reason_and_still_the_good_model(smollm2_path, tmp_path):
    """Sparse copies: the same headers and sizes, without 100 MB of tensor data each (only headers are read)."""
    models = tmp_path / "models"
    models.mkdir()
    src = Path(smollm2_path)
    os.symlink(src, models / "good.gguf")
    damages = gguf_damage.catalogue(src)
    for damage in damages:
        gguf_damage.sparse_copy(damage, src, models / damage.filename)
    library = ModelLibrary(models_dir=models, state_file=tmp_path / "library.json", scan_external=False)
    entries = library.scan()
    listed = {e.path.name for e in entries}
    problems = {path.name: reason for path, reason in library.problems}
    assert "good.gguf" in listed
    for damage in damages:
        assert damage.filename in listed or damage.filename in problems, damage.name
        if damage.filename in problems:
            assert damage.filename in problems[damage.filename]
            assert damage.expect in problems[damage.filename] or not damage.expect
    # What the header check catches, the library shows as a problem: everything but damage only
    # llama.cpp can see (a consistent header with a wrong shape) and harmless byte flips.
    for name in ("nested-arrays-60k", "block-count-0", "block-count-100000", "alignment-0", "huge-string-length"):
        assert f"{name}.gguf" in problems, name
    # A rescan reads the remembered verdicts and gives the same answer.
    assert {e.path.name for e in ModelLibrary(models, tmp_path / "library.json", False).scan()} == listed


@pytest.mark.parametrize("name", ["block-count-100000", "nested-arrays-60k", "huge-string-length"])
def test_the_cli_says_what_is_wrong_without_a_traceback(smollm2_path, tmp_path, name):
    src = Path(smollm2_path)
    damage = next(d for d in gguf_damage.catalogue(src) if d.name == name)
    path = tmp_path / damage.filename
    gguf_damage.sparse_copy(damage, src, path)
    run = subprocess.run(
        [sys.executable, "-m", "engine", "generate", "--model", str(path), "--draft", "none", "hello"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0 and run.returncode > 0  # an exit status, not a signal
    assert "Traceback" not in run.stderr
    assert damage.filename in run.stderr and damage.expect in run.stderr
