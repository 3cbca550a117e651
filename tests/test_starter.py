"""Assembling a model from PyPI-style part packages: streamed, hashed, renamed only when right."""

import hashlib
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.models import starter


def write_part_packages(root: Path, data: bytes, prefix: str, n_parts: int = 3) -> None:
    """data cut into importable part packages <prefix>1..N under root, as the starter extra ships them."""
    cuts = [len(data) * i // n_parts for i in range(n_parts + 1)]
    for n in range(1, n_parts + 1):
        pkg = root / f"{prefix}{n}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{n:02d}.bin").write_bytes(data[cuts[n - 1] : cuts[n]])


@pytest.fixture
def part_packages(tmp_path, monkeypatch, smollm2_path):
    """SmolLM2 cut into three importable part packages, as the starter extra ships the Qwen pair."""
    data = Path(smollm2_path).read_bytes()
    write_part_packages(tmp_path / "site", data, "specula_test_part")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = starter.StarterModel(
        filename="assembled.gguf",
        role="target",
        package_prefix="specula_test_part",
        n_parts=3,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    return model, data


def test_assembles_verifies_and_is_idempotent(tmp_path, part_packages):
    model, data = part_packages
    seen = []
    path = starter.assemble(model, tmp_path / "models", progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == data
    assert seen[-1] == (len(data), len(data)) and all(a <= b for (a, _), (b, _) in zip(seen, seen[1:], strict=False))
    stamp = path.stat().st_mtime_ns
    assert starter.assemble(model, tmp_path / "models") == path  # already there: nothing rewritten
    assert path.stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["assembled.gguf"]


def test_a_wrong_hash_names_the_file_and_leaves_nothing(tmp_path, part_packages):
    model, _ = part_packages
    bad = starter.StarterModel(**{**model.__dict__, "sha256": "0" * 64})
    with pytest.raises(starter.StarterHashError, match="assembled.gguf") as e:
        starter.assemble(bad, tmp_path / "models")
    assert "was not installed" in str(e.value)
    assert list((tmp_path / "models").iterdir()) == []


def test_missing_part_packages_say_how_to_install_them(tmp_path):
    missing = starter.StarterModel("x.gguf", "target", "specula_no_such_part", 2, 10, "0" * 64)
    with pytest.raises(starter.StarterMissingError) as e:
        starter.assemble(missing, tmp_path)
    assert "pip install '.[starter]'" in e.value.user_message()
    assert isinstance(e.value, EngineError)
