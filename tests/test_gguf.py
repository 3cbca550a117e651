"""Reading GGUF headers, refusing bad files, and the draft compatibility check (real files)."""

import shutil

import pytest

from engine.config import ModelSpec
from engine.errors import IncompatibleDraftError, ModelFileError
from engine.gguf.header import read_header
from engine.gguf.pairing import check_compatible


def test_header_describes_the_model(qwen_paths, smollm2_path):
    target = read_header(qwen_paths[0])
    assert target.architecture == "qwen2"
    assert target.quantization == "Q4_K_M"
    assert target.context_length == 32768
    assert len(target.tokens) == 151936
    assert 1.4e9 < target.n_params < 1.9e9
    assert target.data_end == target.file_size
    small = read_header(smollm2_path)
    assert small.architecture == "llama" and len(small.tokens) == 49152
    assert small.vocab_fingerprint != target.vocab_fingerprint
    assert read_header(qwen_paths[1]).vocab_fingerprint == target.vocab_fingerprint


def test_not_gguf_is_refused_with_its_reason(tmp_path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("these are my notes, not a model")
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        read_header(bogus)


def test_truncated_file_is_refused(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as src, open(cut, "wb") as out:
        out.write(src.read(50_000_000))
    with pytest.raises(ModelFileError, match="truncated"):
        read_header(cut)
    with open(smollm2_path, "rb") as src, open(cut, "wb") as out:
        out.write(src.read(100_000))  # ends inside the vocabulary
    with pytest.raises(ModelFileError, match="cut off inside its header"):
        read_header(cut)


def test_damaged_header_is_refused(tmp_path, smollm2_path):
    bad = tmp_path / "bad.gguf"
    shutil.copy(smollm2_path, bad)
    with open(bad, "r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 16)  # tensor and key counts become absurd
    with pytest.raises(ModelFileError, match="damaged"):
        read_header(bad)


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        read_header(tmp_path / "nowhere.gguf")


def test_the_qwen_draft_fits_the_qwen_target(qwen_paths):
    check_compatible(read_header(qwen_paths[0]), read_header(qwen_paths[1]))


def test_an_incompatible_draft_is_refused_naming_the_first_differing_token(qwen_paths, smollm2_path):
    with pytest.raises(IncompatibleDraftError) as e:
        check_compatible(read_header(qwen_paths[0]), read_header(smollm2_path))
    assert "token 5 is '&' in the target but '<file_sep>' in the draft" in str(e.value)


def test_engine_refuses_the_incompatible_pair_before_loading(qwen_paths, smollm2_path):
    from engine.decoding.chat_engine import Engine

    with pytest.raises(IncompatibleDraftError, match="cannot be used with the target"):
        Engine(ModelSpec(qwen_paths[0]), ModelSpec(smollm2_path))


def test_engine_refuses_a_non_gguf_file(tmp_path):
    from engine.decoding.chat_engine import Engine

    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        Engine(ModelSpec(str(bogus)))
