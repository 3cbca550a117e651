"""The per-answer figures a response carries beside OpenAI's own fields, read from AnswerStats.

`timings` uses llama-server's names (prompt_n, predicted_per_second, draft_n…) so tools that read
llama-server's figures read ours; `speculation` says what speculation did and was worth.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine import AnswerStats, SpecParams


def usage(stats: AnswerStats) -> dict:
    """OpenAI's usage, with the prompt tokens that came from the KV cache as cached_tokens."""
    cached = max(stats.n_prompt_tokens - stats.n_prompt_evaluated, 0)
    return {
        "prompt_tokens": stats.n_prompt_tokens,
        "completion_tokens": stats.n_tokens,
        "total_tokens": stats.n_prompt_tokens + stats.n_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": stats.n_reasoning_tokens},
    }


def timings(stats: AnswerStats, queue_wait_s: float) -> dict:
    return {
        "queue_ms": round(queue_wait_s * 1000, 2),
        "cache_n": max(stats.n_prompt_tokens - stats.n_prompt_evaluated, 0),
        "prompt_n": stats.n_prompt_evaluated,
        "prompt_ms": round(stats.prompt_s * 1000, 2),
        "prompt_per_second": round(stats.prompt_tps, 2),
        "predicted_n": stats.n_tokens,
        "predicted_ms": round(stats.gen_s * 1000, 2),
        "predicted_per_second": round(stats.gen_tps, 2),
        "draft_n": stats.n_drafted,
        "draft_n_accepted": stats.n_accepted,
    }


def speculation(stats: AnswerStats, spec: SpecParams) -> dict:
    """Drafted, accepted, acceptance, the estimated speedup (an estimate: see AnswerStats.plain_s),
    and per drafter its rounds, drafted and accepted tokens; tokens in the answer by source."""
    drafters: dict[str, dict[str, int]] = {}
    for name, drafted, accepted in _rounds(stats.rounds):
        d = drafters.setdefault(name, {"rounds": 0, "drafted": 0, "accepted": 0})
        d["rounds"] += 1
        d["drafted"] += drafted
        d["accepted"] += accepted
    return {
        "mode": spec.mode.value,
        "draft_length": spec.draft_length,  # None: chosen each round
        "drafted": stats.n_drafted,
        "accepted": stats.n_accepted,
        "acceptance": round(stats.acceptance_rate, 4),
        "mean_accepted_length": round(stats.mean_accepted_length, 3),
        "estimated_speedup": round(stats.estimated_speedup, 3),
        "rounds": stats.n_rounds,
        "drafters": drafters,  # "none": plain steps
        "tokens_by_source": dict(stats.tokens_by_source),
        "plain_reason": stats.plain_reason or None,  # why the model is decoded plainly whatever was asked
    }


def _rounds(rounds: Iterable) -> Iterable[tuple[str, int, int]]:
    """(drafter name, drafted, accepted) per round, from a named round record or a plain tuple
    (drafter, k, drafted, accepted); a drafter kind may be an enum or its name."""
    for r in rounds:
        if isinstance(r, tuple) and not hasattr(r, "drafter"):
            drafter, _k, drafted, accepted = r[:4]
        else:
            drafter = r.drafter
            drafted = getattr(r, "n_drafted", getattr(r, "drafted", 0))
            accepted = getattr(r, "n_accepted", getattr(r, "accepted", 0))
        yield str(getattr(drafter, "value", drafter)), int(drafted), int(accepted)
