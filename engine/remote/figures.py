"""The figures of one remote answer, each labelled by the server that reported it.

Servers report speculation in fields beside OpenAI's, on the last chunks of a stream (_SHAPES):
- Specula: `speculation` {drafted, accepted, acceptance…} and llama-server's `timings` names on the
  finish chunk (engine/serving/figures.py);
- vLLM: `metrics` on the usage chunk, {tokens_per_second} with --enable-per-request-metrics and
  `speculative_decoding` {num_draft_tokens, num_accepted_draft_tokens, draft_acceptance_rate} with
  --per-request-spec-decode-metrics (docs/features/speculative_decoding/acceptance_metrics.md);
- SGLang: a choice's `meta_info` {spec_draft_token_num, spec_accept_token_num, spec_accept_rate,
  decode_throughput} when the request sets return_meta_info, which SGLang refuses on a stream, so
  a streamed SGLang answer has none (managers/tokenizer_manager.py, entrypoints/openai/serving_chat.py);
- llama-server: `timings` {predicted_per_second, draft_n, draft_n_accepted}, the two draft counts only
  when it drafted (tools/server/README.md, result_timings::to_json in tools/server/server-task.cpp).
What the client measured itself (time to first token, tokens/s) is always there besides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class FigureSource(str, Enum):
    """Who measured the speculation figures (the client's own timings are in every record)."""

    SPECULA = "specula"
    LLAMA_SERVER = "llama-server"
    VLLM = "vllm"
    SGLANG = "sglang"
    CLIENT = "client"  # the server reported nothing: only what this computer measured


NO_SERVER_FIGURES = "The server gave no speculation figures; tokens/s and time to first token are measured here."


@dataclass(frozen=True)
class RemoteFigures:
    """One answer's figures. n_drafted is None when the server said nothing about drafting (see note)."""

    source: FigureSource
    client_ttft_s: float | None = None  # request sent to first text, as the user waited for it
    client_tps: float | None = None  # tokens after the first, over the time from the first text to the last
    n_drafted: int | None = None
    n_accepted: int | None = None
    acceptance_rate: float | None = None  # n_accepted / n_drafted, or the server's own rate
    server_tps: float | None = None  # the server's generation rate, as it measured it
    note: str = ""  # why a figure is missing
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the server's fields, as sent


Path = tuple[str, ...]  # keys into the extras, outermost first


@dataclass(frozen=True)
class _Shape:
    """Where one server puts its figures. It is that server's when drafted[0] names an object."""

    source: FigureSource
    drafted: Path
    accepted: Path
    rate: Path | None  # the server's own acceptance rate, used when it gives no accepted count
    tps: Path
    absent_note: str  # when the object is there but the draft count is not

    def read(self, extras: Mapping[str, Any], client_ttft_s: float | None, client_tps: float | None) -> RemoteFigures:
        n_drafted = _count(_at(extras, self.drafted))
        n_accepted = _count(_at(extras, self.accepted)) if n_drafted is not None else None
        if n_drafted and n_accepted is not None:
            acceptance = min(n_accepted / n_drafted, 1.0)
        else:
            acceptance = _fraction(_at(extras, self.rate)) if n_drafted and self.rate else None
        tops = {path[0] for path in (self.drafted, self.accepted, self.tps)}
        return RemoteFigures(
            self.source,
            client_ttft_s,
            client_tps,
            n_drafted,
            n_accepted,
            acceptance,
            _positive(_at(extras, self.tps)),
            "" if n_drafted is not None else self.absent_note,
            {key: extras[key] for key in sorted(tops) if key in extras},
        )


_SHAPES = (
    _Shape(
        FigureSource.SPECULA,
        ("speculation", "drafted"),
        ("speculation", "accepted"),
        ("speculation", "acceptance"),
        ("timings", "predicted_per_second"),
        "Specula reported no speculation figures for this answer.",
    ),
    _Shape(
        FigureSource.VLLM,
        ("metrics", "speculative_decoding", "num_draft_tokens"),
        ("metrics", "speculative_decoding", "num_accepted_draft_tokens"),
        ("metrics", "speculative_decoding", "draft_acceptance_rate"),
        ("metrics", "tokens_per_second"),
        "vLLM gave no speculation figures (it sends them when started with --per-request-spec-decode-metrics).",
    ),
    _Shape(
        FigureSource.SGLANG,
        ("meta_info", "spec_draft_token_num"),
        ("meta_info", "spec_accept_token_num"),
        ("meta_info", "spec_accept_rate"),
        ("meta_info", "decode_throughput"),
        "SGLang gave no speculation figures for this answer.",
    ),
    _Shape(
        FigureSource.LLAMA_SERVER,
        ("timings", "draft_n"),
        ("timings", "draft_n_accepted"),
        None,
        ("timings", "predicted_per_second"),
        "llama-server drafted nothing for this answer (no draft model, or no draft was tried).",
    ),
)


def read_figures(extras: Mapping[str, Any], client_ttft_s: float | None, client_tps: float | None) -> RemoteFigures:
    """The figures from the non-OpenAI fields of a stream's chunks (extras), server by server."""
    for shape in _SHAPES:
        if isinstance(extras.get(shape.drafted[0]), Mapping):
            return shape.read(extras, client_ttft_s, client_tps)
    return RemoteFigures(FigureSource.CLIENT, client_ttft_s, client_tps, note=NO_SERVER_FIGURES)


def _at(extras: Mapping[str, Any], path: Path | None) -> Any:
    value: Any = extras
    for key in path or ():
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number >= 0 else None


def _fraction(value: Any) -> float | None:
    number = _number(value)
    return number if number is not None and 0.0 <= number <= 1.0 else None


def _positive(value: Any) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None
