"""Repository file names from the hub are untrusted: only plain names may become paths, on every platform."""

from __future__ import annotations

import json
from pathlib import PurePosixPath, PureWindowsPath

import pytest

from engine.models.download import Download, DownloadError, DownloadRecord, pending_downloads
from engine.models.hub import HubFile, group_gguf_files, is_safe_file_name
from engine.models.library import PENDING_SUFFIX

HOSTILE = [
    "..\\..\\evil.gguf",
    "sub\\..\\..\\evil.gguf",
    "C:\\x.gguf",
    "C:x.gguf",
    "c:/x.gguf",
    "\\\\server\\share\\x.gguf",
    "\\\\?\\C:\\x.gguf",
    "\\x.gguf",
    "x.gguf:stream",
    "..",
    ".",
    "",
    "CON.gguf",
    "nul",
    "lpt1.gguf",
    "model.gguf.",
    " model.gguf",
    "model\x00.gguf",
    "new\nline.gguf",
    'a"b.gguf',
    "a*b.gguf",
    "a?b.gguf",
    "a<b>.gguf",
    "a|b.gguf",
    "x" * 300 + ".gguf",
]
PLAIN = [
    "model-Q4_K_M.gguf",
    "Qwen2.5-Coder-1.5B-Instruct-q4_k_m.gguf",
    "a..b.gguf",
    "..gguf",
    "modèle.gguf",
    "x-00001-of-00002.gguf",
]

MODELS = {
    "posix": PurePosixPath("/home/u/.local/share/Specula/models"),
    "windows": PureWindowsPath("D:/Users/u/AppData/Local/Specula/models"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused(name):
    assert not is_safe_file_name(name)


@pytest.mark.parametrize("name", PLAIN)
@pytest.mark.parametrize("flavour", MODELS)
def test_plain_names_land_inside_the_models_folder_on_every_platform(name, flavour):
    assert is_safe_file_name(name)
    models = MODELS[flavour]
    assert (models / name).parent == models


def test_the_hostile_names_really_escape_on_windows_without_the_check():
    """The defect itself, under Windows path rules: what the check stops."""
    models = MODELS["windows"]
    escaping = [n for n in HOSTILE[:8] if (models / n).parent != models or ".." in (models / n).parts]
    assert escaping == HOSTILE[:8]


def test_the_repository_listing_leaves_hostile_files_out():
    # (A '/' in a hub path separates folders: 'c:/x.gguf' is the plain file x.gguf in folder 'c:'.)
    files = [HubFile(n, 1000, None) for n in HOSTILE if n.endswith(".gguf") and "/" not in n]
    files += [HubFile("folder/" + n, 1000, None) for n in ("..\\evil.gguf", "C:evil.gguf")]
    files.append(HubFile("folder/good-Q8_0.gguf", 1000, None))
    groups = group_gguf_files(files)
    assert [g.files[0].name for g in groups] == ["good-Q8_0.gguf"]


def test_a_download_of_a_hostile_name_refuses_before_writing_anything(tmp_path):
    models = tmp_path / "models"
    record = DownloadRecord("someone/repo", "abc123", (HubFile("..\\..\\evil.gguf", 10, "0" * 64),))
    download = Download(record, models, hub=object())
    with pytest.raises(DownloadError, match="not a plain file name"):
        download.run()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []


def test_a_pending_record_naming_a_path_outside_is_never_resumed(tmp_path):
    good = {"repo_id": "r/a", "revision": "1", "files": [{"path": "a.gguf", "size": 1, "sha256": None}]}
    bad = {"repo_id": "r/b", "revision": "1", "files": [{"path": "C:\\Windows\\b.gguf", "size": 1, "sha256": None}]}
    (tmp_path / ("a.gguf" + PENDING_SUFFIX)).write_text(json.dumps(good))
    (tmp_path / ("b.gguf" + PENDING_SUFFIX)).write_text(json.dumps(bad))
    assert [r.repo_id for r in pending_downloads(tmp_path)] == ["r/a"]
