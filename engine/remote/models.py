"""A server's models from GET /models, with the context size wherever the server puts it.

The context size a server will actually use comes first: vLLM's `max_model_len` (its ModelCard,
vllm/entrypoints/openai/protocol.py; Specula sends it too), then `meta.n_ctx` (Specula, newer
llama-server); else what the model was trained for, llama-server's `meta.n_ctx_train`
(tools/server/README.md, "GET /v1/models"; `meta` may be null while it loads), else a plain
`context_length` as some other servers send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RemoteModel:
    id: str  # the name to send as `model`
    context_size: int | None = None  # tokens; None when the server does not say
    owner: str | None = None  # `owned_by`: "vllm", "llamacpp", "specula", "sglang"…


def parse_model_list(body: Any) -> list[RemoteModel] | None:
    """The models of an OpenAI list body ({"data": [...]}); None when the body is not one.
    Entries without a string id are skipped."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return None
    return [_model(entry) for entry in data if isinstance(entry, Mapping) and isinstance(entry.get("id"), str)]


def _model(entry: Mapping[str, Any]) -> RemoteModel:
    meta = entry.get("meta") if isinstance(entry.get("meta"), Mapping) else {}
    sizes = (entry.get("max_model_len"), meta.get("n_ctx"), meta.get("n_ctx_train"), entry.get("context_length"))
    size = next((int(s) for s in sizes if isinstance(s, int) and not isinstance(s, bool) and s > 0), None)
    owner = entry.get("owned_by")
    return RemoteModel(entry["id"], size, owner if isinstance(owner, str) else None)
