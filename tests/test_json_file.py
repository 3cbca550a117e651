"""JSON files are replaced whole: a write that fails midway leaves the old file and no stray temporary."""

import json

import pytest

from engine.json_file import write_json


def test_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "nested" / "settings.json"
    write_json(path, {"name": "Qwen · 0.5B", "n": 1})
    write_json(path, {"name": "second"}, indent=2)
    assert json.loads(path.read_text(encoding="utf-8")) == {"name": "second"}
    assert [p.name for p in path.parent.iterdir()] == ["settings.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "library.json"
    write_json(path, {"added": ["a.gguf"]})
    with pytest.raises(TypeError):  # json fails partway through: the new file would be half written
        write_json(path, {"added": ["b.gguf", object()]})
    assert json.loads(path.read_text(encoding="utf-8")) == {"added": ["a.gguf"]}
    assert [p.name for p in tmp_path.iterdir()] == ["library.json"]


def test_a_path_with_undecodable_bytes_is_written_and_read_back(tmp_path):
    name = b"caf\xe9.gguf".decode("utf-8", "surrogateescape")  # as os.listdir gives a Latin-1 file name
    path = tmp_path / "library.json"
    write_json(path, {"added": [name]})
    assert json.loads(path.read_text(encoding="utf-8")) == {"added": [name]}
