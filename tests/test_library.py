"""The model library on real GGUF files laid out like the app folder, the HF cache and LM Studio."""

from pathlib import Path

import pytest

import engine.models.library
from engine.errors import ModelFileError
from engine.models.library import LibraryError, ModelLibrary, reveal_command


@pytest.fixture
def layout(tmp_path, smollm2_path, qwen_paths):
    """Qwen 1.5B in the app folder, Qwen 0.5B in an HF cache snapshot, SmolLM2 in LM Studio's folder.

    Symlinks stand in for copies (the HF cache itself is made of symlinks into blobs/).
    """
    target, draft = map(Path, qwen_paths)
    models = tmp_path / "models"
    snapshot = tmp_path / "hf" / "models--Qwen--Qwen2.5-Coder-0.5B-Instruct-GGUF" / "snapshots" / "abc123"
    lmstudio = tmp_path / "lmstudio" / "HuggingFaceTB" / "SmolLM2-GGUF"
    for folder in (models, snapshot, lmstudio):
        folder.mkdir(parents=True)
    (models / target.name).symlink_to(target)
    (snapshot / draft.name).symlink_to(draft)
    (lmstudio / Path(smollm2_path).name).symlink_to(smollm2_path)
    (models / "notes.gguf").write_text("not a model")
    return tmp_path


def make_library(root: Path) -> ModelLibrary:
    return ModelLibrary(
        root / "models",
        root / "state" / "library.json",
        hf_cache_dir=root / "hf",
        lmstudio_dirs=[root / "lmstudio"],
    )


def by_name(entries):
    return {e.path.name: e for e in entries}


def test_scan_describes_models_from_every_source_and_rejects_non_gguf(layout):
    library = make_library(layout)
    entries = by_name(library.scan())

    assert set(entries) == {
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    }
    target = entries["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    assert (target.source, target.removable) == ("app", True)
    assert (target.architecture, target.quantization, target.context_length) == ("qwen2", "Q4_K_M", 32768)
    assert target.file_size == 1_117_320_768
    assert target.size_label == "1.8B"
    assert target.family == "qwen2.5-coder"
    draft = entries["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
    assert (draft.source, draft.removable) == ("hf-cache", False)
    assert draft.vocab_fingerprint == target.vocab_fingerprint
    smol = entries["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert (smol.source, smol.architecture, smol.quantization, smol.n_vocab) == ("lmstudio", "llama", "Q4_1", 49152)
    assert smol.vocab_fingerprint != target.vocab_fingerprint

    [(bad_path, reason)] = library.problems
    assert bad_path.name == "notes.gguf"
    assert "not a GGUF model file" in reason


def test_truncated_file_is_rejected_with_a_reason(layout, smollm2_path):
    with open(smollm2_path, "rb") as f:
        (layout / "models" / "half.gguf").write_bytes(f.read(5_000_000))
    library = make_library(layout)
    library.scan()
    reasons = {p.name: r for p, r in library.problems}
    assert "truncated" in reasons["half.gguf"]


def test_rescan_reads_no_header_again(layout, monkeypatch):
    make_library(layout).scan()

    def no_reading(path):
        raise AssertionError(f"header of {path} read again")

    monkeypatch.setattr(engine.models.library, "read_header", no_reading)
    fresh = make_library(layout)  # a new instance: the cache on disk is what helps
    assert len(fresh.scan()) == 3
    assert "not a GGUF" in fresh.problems[0][1]  # bad files are remembered as bad


def test_compatible_drafts_for_qwen_target(layout):
    library = make_library(layout)
    entries = by_name(library.scan())
    target = entries["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]

    drafts = library.compatible_drafts(target)

    assert [d.path.name for d in drafts] == ["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
    # SmolLM2 is smaller but has another vocabulary; the draft is never offered a bigger target.
    assert library.compatible_drafts(entries["SmolLM2-135M-Instruct.Q4_1.gguf"]) == []


def test_added_file_is_remembered_and_forgotten(layout, tmp_path, smollm2_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.gguf").symlink_to(smollm2_path)
    library = make_library(layout)
    entry = library.add_file(elsewhere / "mine.gguf")
    assert (entry.source, entry.removable) == ("added", False)

    reopened = make_library(layout)
    entries = reopened.scan()
    # The same bytes are also in LM Studio's folder: the added path wins (it is listed first).
    assert [e.source for e in entries if e.path.name == "mine.gguf"] == ["added"]

    reopened.remove(next(e for e in entries if e.source == "added"))
    assert (elsewhere / "mine.gguf").exists()  # forgotten, not deleted
    assert "mine.gguf" not in by_name(make_library(layout).scan())


def test_add_file_rejects_non_gguf(layout, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        make_library(layout).add_file(junk)
    with pytest.raises(ModelFileError, match="not found"):
        make_library(layout).add_file(tmp_path / "nowhere.gguf")


def test_remove_deletes_only_app_files(layout):
    library = make_library(layout)
    entries = by_name(library.scan())
    with pytest.raises(LibraryError, match="Hugging Face cache"):
        library.remove(entries["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"])
    assert entries["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"].path.exists()

    library.remove(entries["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"])
    assert not (layout / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").exists()
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" not in by_name(library.scan())


def test_split_model_is_listed_once_with_all_parts(tmp_path, smollm2_path):
    # Each part of a split GGUF is itself a GGUF file; two links to SmolLM2 stand in for them.
    models = tmp_path / "models"
    models.mkdir()
    for i in (1, 2):
        (models / f"Big-Q4_1-0000{i}-of-00002.gguf").symlink_to(smollm2_path)
    library = ModelLibrary(models, tmp_path / "library.json", scan_external=False)
    [entry] = library.scan()
    assert entry.path.name == "Big-Q4_1-00001-of-00002.gguf"
    assert entry.file_size == 2 * Path(smollm2_path).stat().st_size

    (models / "Big-Q4_1-00002-of-00002.gguf").unlink()
    assert library.scan() == []
    assert "part 'Big-Q4_1-00002-of-00002.gguf' is missing" in library.problems[0][1]


def test_reveal_command_per_platform():
    path = Path("/m/x.gguf")
    assert reveal_command(path, "Darwin") == ["open", "-R", "/m/x.gguf"]
    assert reveal_command(path, "Windows") == ["explorer", f"/select,{path}"]
    assert reveal_command(path, "Linux") == ["xdg-open", "/m"]


def test_draft_problem_judges_any_file_in_the_words_of_draft_choices(layout, tmp_path):
    library = make_library(layout)
    entries = by_name(library.scan())
    target = entries["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    hidden = {e.path.name: reason for e, reason in library.draft_choices(target).hidden}
    outside = tmp_path / "elsewhere"  # files the library does not list: chosen from disk in Settings
    outside.mkdir()
    for name in ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"):
        (outside / name).symlink_to(entries[name].path.resolve())
    small = outside / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    small.symlink_to(entries[small.name].path.resolve())

    assert library.draft_problem(target.path, small) is None
    assert (
        library.draft_problem(target.path, outside / "SmolLM2-135M-Instruct.Q4_1.gguf")
        == hidden["SmolLM2-135M-Instruct.Q4_1.gguf"]
    )
    # A file as large as the target is no draft, whatever its vocabulary (the size is checked first).
    assert library.draft_problem(small, outside / target.path.name) == "not smaller than the target"
    assert library.draft_problem(target.path, outside / "gone.gguf") == "the file is missing"
    with pytest.raises(ModelFileError):
        library.draft_problem(target.path, layout / "models" / "notes.gguf")


def test_an_embedding_model_is_listed_for_document_search_not_for_chat(layout):
    from tests import embedding_fixture

    minilm = embedding_fixture.minilm_gguf()  # a real BERT embedding GGUF (converted from PyPI's MiniLM)
    (layout / "models" / "all-MiniLM-L6-v2.F16.gguf").symlink_to(minilm)
    library = make_library(layout)
    entries = by_name(library.scan())
    assert "all-MiniLM-L6-v2.F16.gguf" not in entries and len(entries) == 3  # never offered as a chat model
    assert [p.name for p in library.embedding_models] == ["all-MiniLM-L6-v2.F16.gguf"]
    assert [p for p, _ in library.problems if p.name == "all-MiniLM-L6-v2.F16.gguf"] == []  # not a bad file either
    with pytest.raises(ModelFileError, match="is an embedding model, not a chat model") as refused:
        library.add_file(minilm)
    assert "Documents" in refused.value.hint
