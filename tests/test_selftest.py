"""`--self-test` from the source install: real models, real Qt offscreen, one line and an exit code."""

import re
import subprocess
import sys

from tests.models import REPO


def self_test(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.selftest", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_passes_with_a_draft_model(smollm2_path):
    # SmolLM2 as its own draft: same vocabulary, so greedy drafts are accepted.
    result = self_test(smollm2_path, smollm2_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specula self-test OK: backend CPU"), result.stdout
    accepted, drafted = map(int, re.search(r"accepted (\d+)/(\d+)", lines[0]).groups())
    assert 0 < accepted <= drafted
    assert "qt offscreen OK" in lines[0]


def test_passes_with_prompt_lookup_alone(smollm2_path):
    result = self_test("--self-test", smollm2_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("specula self-test OK:")


def test_names_the_problem_with_a_file_that_is_not_gguf(tmp_path):
    junk = tmp_path / "notes.gguf"
    junk.write_text("these are notes, not a model\n")
    result = self_test(str(junk))
    assert result.returncode == 1
    assert result.stdout.startswith("specula self-test FAILED:"), result.stdout
    assert "notes.gguf" in result.stdout and "not a GGUF model file" in result.stdout
    assert len(result.stdout.splitlines()) == 1


def test_an_incompatible_draft_fails(smollm2_path, qwen_paths):
    result = self_test(qwen_paths[0], smollm2_path)
    assert result.returncode == 1
    assert result.stdout.startswith("specula self-test FAILED: The draft"), result.stdout
    assert "cannot be used with the target" in result.stdout


def test_usage_error_without_a_model():
    result = self_test()
    assert result.returncode == 2
    assert "usage:" in result.stderr
