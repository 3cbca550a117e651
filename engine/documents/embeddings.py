"""Passages and questions as vectors: a GGUF embedding model run through the engine's llama.cpp.

The only module of the document library that runs a model (the import contract lets it, and
only it, reach engine.llama.embedding: loading through the engine's backends and weight placement,
as a target model is). Everything else here is plain: which file is an embedding model (from its
header, before llama.cpp sees it), the model's identity for the vectors stored in the index,
and the words some models want before a text.

An embedding model is a file whose header declares a pooling (mean, CLS or last token: BERT,
nomic-bert, Jina, Qwen3-Embedding, EmbeddingGemma...) or whose architecture is an encoder
llama.cpp pools. A chat model pools nothing and a reranker ranks instead: both are refused with
a message that says so.

Vectors are L2-normalised float32: a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.config import GPU_LAYERS_AUTO
from engine.errors import EngineError
from engine.gguf.header import ENCODER_ARCHITECTURES, RANK_POOLING, GGUFInfo, read_header
from engine.llama.embedding import EmbeddingRunner

# llama.cpp's llama_pooling_type values as GGUF files store them ({arch}.pooling_type).
POOLING = {1: "mean", 2: "CLS", 3: "last token"}
# Encoders llama.cpp runs for embeddings; a file of these without a pooling type was converted badly.
ENCODERS = ENCODER_ARCHITECTURES
SUGGESTION = "Choose an embedding model GGUF, such as nomic-embed-text-v1.5 or all-MiniLM-L6-v2."
HEADER_BYTES = 1 << 20  # the model's identity: its name, size and a hash of its first MiB (the header)


class EmbeddingModelError(EngineError):
    """The file is not an embedding model llama.cpp can use; str() says what it is instead."""

    hint = SUGGESTION


@dataclass(frozen=True)
class Prefixes:
    """What a model wants before a stored text and before a question (trained with them)."""

    document: str = ""
    query: str = ""


# Model names (general.name, general.basename or the file name, lowercase) and their prefixes, from
# each model's card. First match wins; nomic-bert files get nomic's even when renamed.
KNOWN_PREFIXES: tuple[tuple[re.Pattern, Prefixes], ...] = (
    (re.compile(r"nomic-embed-code"), Prefixes("", "Represent this query for searching relevant code: ")),
    (re.compile(r"nomic-embed-text|nomic-bert"), Prefixes("search_document: ", "search_query: ")),
    (re.compile(r"embeddinggemma|gemma-embedding"), Prefixes("title: none | text: ", "task: search result | query: ")),
    (
        re.compile(r"qwen3-embedding"),
        Prefixes("", "Instruct: Given a question, retrieve passages that answer it\nQuery: "),
    ),
    (
        re.compile(r"mxbai-embed|snowflake-arctic-embed|bge-[a-z]+-en"),
        Prefixes("", "Represent this sentence for searching relevant passages: "),
    ),
    (re.compile(r"multilingual-e5|\be5-"), Prefixes("passage: ", "query: ")),
)


def check(path: str | os.PathLike) -> GGUFInfo:
    """The file's header when it is an embedding model; otherwise EmbeddingModelError (or
    ModelFileError for a file that is not GGUF at all) saying what it is. Reads the header only."""
    info = read_header(path)
    arch = info.architecture
    pooling = info.get(f"{arch}.pooling_type")
    name = Path(path).name
    if pooling == RANK_POOLING:
        raise EmbeddingModelError(f"{name} is a reranker ({arch}): it scores passages, it does not embed them.")
    if pooling in POOLING:
        return info
    if arch in ENCODERS:
        raise EmbeddingModelError(
            f"{name} ({arch}) does not say how to pool its vectors; convert it again with llama.cpp's "
            "convert_hf_to_gguf.py, which writes the pooling type."
        )
    kind = "a chat model" if info.chat_template else "a text-generation model"
    raise EmbeddingModelError(f"{name} is {kind} ({arch}), not an embedding model.")


def model_key(path: str | os.PathLike) -> str:
    """The model's identity for stored vectors: its file name, size and a hash of its header, so a
    moved file keeps its vectors and another quantization or version gets its own."""
    path = Path(path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read(HEADER_BYTES)).hexdigest()[:16]
    return f"{path.name}|{path.stat().st_size}|{digest}"


def prefixes_for(info: GGUFInfo) -> Prefixes:
    names = " ".join(
        str(v).lower().replace(" ", "-")
        for v in (info.get("general.name"), info.get("general.basename"), Path(info.path).name, info.architecture)
        if v
    )
    return next((p for pattern, p in KNOWN_PREFIXES if pattern.search(names)), Prefixes())


class Embedder:
    """An embedding model, loaded: passages and questions to unit vectors. One owner thread.

    Raises ModelFileError / EmbeddingModelError for a file that is not an embedding model (before
    llama.cpp is asked), ModelLoadError when llama.cpp cannot load it.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        n_threads: int | None = None,
        n_gpu_layers: int = GPU_LAYERS_AUTO,
        allow_amx: bool = False,
    ):
        self.path = str(path)
        self.info = check(path)
        self.key = model_key(path)
        self.prefixes = prefixes_for(self.info)
        self._runner = EmbeddingRunner(path, n_threads=n_threads, n_gpu_layers=n_gpu_layers, allow_amx=allow_amx)
        self.dim = self._runner.n_embd
        self.max_tokens = self._runner.max_tokens
        self.pooling = self._runner.pooling

    @property
    def name(self) -> str:
        return self.info.name

    def describe(self) -> str:
        """One line for users: the model, where it runs, its vectors."""
        where = self._runner.backend if self._runner.gpu_layers else f"CPU ({self._runner.weights.summary})"
        return f"{self.name}: {self.dim}-dimensional vectors, {self.pooling} pooling, up to {self.max_tokens} tokens, {where}"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors of stored texts (each cut to max_tokens)."""
        return self._embed([self.prefixes.document + t for t in texts])

    def embed_query(self, question: str) -> np.ndarray:
        """(dim,) float32 unit vector of a question."""
        return self._embed([self.prefixes.query + question])[0]

    def tokens(self, text: str) -> list[int]:
        """The model's tokens for text, as embedded (special tokens added, cut to max_tokens)."""
        return self._runner.tokenize(text)

    def _embed(self, texts: list[str]) -> np.ndarray:
        vectors = self._runner.embed_tokens([self._runner.tokenize(t) for t in texts])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
