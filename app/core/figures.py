"""What an answer's figures say, in words: the footer's line, the comparison with plain decoding,
the Details panel's summaries. Pure text from AnswerStats (no Qt): the footer, the export and the
answer controller share it.
"""

from __future__ import annotations

from engine import AnswerStats, DrafterKind

DRAFTER_LABELS = {
    DrafterKind.DRAFT_MODEL: "draft model",
    DrafterKind.LOOKUP: "prompt lookup",
    DrafterKind.HISTORY: "history",
    DrafterKind.DOCUMENTS: "your documents",
    DrafterKind.MTP: "MTP head",
    DrafterKind.NONE: "no draft (plain step)",
}

ESTIMATE_TIP = (
    "An estimate, not a measurement: what plain decoding would have taken (one single-token step per token, "
    "priced from each round's own measured verification time by this machine's step/batch cost ratio, "
    "never above what the answer's own plain steps took, "
    "plus what a plain step costs beyond it, as measured: sampling, the text, the window) "
    "÷ the time the tokens took. Details shows the numbers.\n"
    "“Compare with plain decoding” measures the real ratio."
)


def speedup_text(stats: AnswerStats) -> str:
    value = stats.estimated_speedup
    return f"≈{value:.2f}× vs plain (estimate)" if value > 0 else "speedup: not yet estimated"


PLAIN_TEXTS = {  # nothing drafted, by the drafting mode the answer was asked with
    "auto": (
        "plain decoding: drafting would not pay on this machine",
        "Auto measured what drafting and verifying cost on this machine and chose plain decoding for every "
        "round: here a draft's verification costs more than the tokens it would save. Drafting pays where "
        "verifying a batch is cheap (a GPU) or where the answer copies the conversation (prompt lookup) or "
        "your earlier conversations (history).",
    ),
    "off": ("plain decoding (speculation off)", "Speculation is off (Settings → Drafter)."),
}
NOTHING_DRAFTED = ("nothing drafted", "No draft tokens: the drafter found nothing to propose in this answer.")


def headline(stats: AnswerStats, params: dict | None = None, comparison: dict | None = None) -> tuple[str, str]:
    """What speculation was worth, in one figure: measured once Compare has run, else estimated,
    or in words when nothing was drafted (a "≈0.98×" there would read as a broken feature).
    A remote answer's headline is where it was computed (no plain run here to measure against)."""
    if stats.remote:
        return remote_where(stats.remote)
    measured = (comparison or {}).get("measured_speedup", 0.0)
    if measured > 0:
        return (
            f"{measured:.2f}× vs plain (measured)",
            f"Measured by “Compare with plain decoding”; the estimate was {speedup_text(stats)}.",
        )
    if not stats.n_drafted and stats.plain_reason:
        return "plain decoding: speculation off for this model", stats.plain_reason[:1].upper() + stats.plain_reason[
            1:
        ] + "."
    if not stats.n_drafted:
        mode = (params or {}).get("spec", {}).get("mode", "")
        return PLAIN_TEXTS.get(mode, NOTHING_DRAFTED)
    return speedup_text(stats), ESTIMATE_TIP


def figures(stats: AnswerStats, params: dict | None = None, comparison: dict | None = None) -> list[tuple[str, str]]:
    """The footer's figures, each with its tooltip."""
    if stats.remote:
        return remote_figures(stats)
    items = [headline(stats, params, comparison)]
    if stats.n_drafted:
        items.append(
            (
                f"{stats.acceptance_rate:.0%} of drafts accepted",
                f"{stats.n_accepted} of {stats.n_drafted} drafted tokens were accepted by the target; "
                f"{stats.mean_accepted_length:.2f} accepted per drafted round on average.",
            )
        )
    from_documents = stats.tokens_by_source.get("documents", 0)
    if from_documents and stats.n_tokens:
        items.append(
            (
                f"{from_documents / stats.n_tokens:.0%} from your documents",
                f"{from_documents} of the answer's {stats.n_tokens} tokens were drafted from the passages of your "
                "documents found for this question and accepted by the model (coloured as your documents); "
                "each saved a step of the target, which is part of the speedup above.",
            )
        )
    items.append((f"{stats.gen_tps:.1f} tok/s", "Tokens per second while generating (after the prompt)."))
    tokens = f"{stats.n_tokens} token{'' if stats.n_tokens == 1 else 's'}"
    if stats.n_reasoning_tokens:
        thinking = f"; {stats.n_reasoning_tokens} of them thinking, for {stats.reasoning_s:.1f} s"
        items.append((f"{tokens} ({stats.n_reasoning_tokens} thinking)", f"Tokens in this answer{thinking}."))
    else:
        items.append((tokens, "Tokens in this answer."))
    if stats.ttft_s:
        items.append(
            (
                f"first token {stats.ttft_s:.2f} s",
                f"Time to first token, including reading the prompt: {stats.n_prompt_evaluated} of "
                f"{stats.n_prompt_tokens} prompt tokens evaluated, the rest reused from the cache.",
            )
        )
    return items


# -- a remote answer: the server's figures, labelled by who measured them --------------------------

REMOTE_SOURCES = {"specula": "Specula", "llama-server": "llama-server", "vllm": "vLLM", "sglang": "SGLang"}
NO_SERVER_FIGURES = "the server gave no speculation figures"


def remote_where(remote: dict) -> tuple[str, str]:
    host = remote.get("host") or "a remote server"
    return (
        f"computed on {host}",
        f"This answer was computed by the server at {host}, not on this computer; the chat itself is kept only here.",
    )


def remote_speculation(remote: dict) -> tuple[str, str]:
    """The server's speculation in words, named by the server that reported it."""
    label = REMOTE_SOURCES.get(remote.get("source", ""))
    note = remote.get("note") or ""
    if label is None:  # the client's own figures only (or none recorded)
        return NO_SERVER_FIGURES, note or "The server reported nothing about speculative decoding."
    n_drafted, n_accepted, rate = remote.get("n_drafted"), remote.get("n_accepted"), remote.get("acceptance_rate")
    said = f"As {label} reported it for this answer."
    if n_drafted is None:
        return f"{label}: no speculation figures", note or said
    if n_drafted == 0:
        return f"{label}: nothing drafted", note or said
    if rate is None:
        return f"{label}: {n_drafted} drafted tokens", said
    counted = f" {n_accepted} of {n_drafted} drafted tokens accepted." if n_accepted is not None else " Its own rate."
    return f"{label}: {rate:.0%} of {n_drafted} drafted tokens accepted", said + counted


def remote_figures(stats: AnswerStats) -> list[tuple[str, str]]:
    """The footer's figures of a remote answer: where, the server's speculation, and what was
    measured on this computer (the network's time included)."""
    remote = stats.remote
    items = [remote_where(remote)]
    if "source" in remote:  # known once the answer ended (not while it streams, nor when it failed)
        items.append(remote_speculation(remote))
    server_tps = remote.get("server_tps")
    server = f" The server measured {server_tps:.1f} tok/s itself." if server_tps else ""
    if remote.get("client_tps"):
        items.append(
            (
                f"{remote['client_tps']:.1f} tok/s measured here",
                "Tokens per second as this computer received them, after the first; the network's pace is "
                f"in it.{server}",
            )
        )
    elif server_tps:
        items.append((f"{server_tps:.1f} tok/s (server)", "Tokens per second as the server measured them."))
    tokens = f"{stats.n_tokens} token{'' if stats.n_tokens == 1 else 's'}"
    items.append((tokens, "Tokens in this answer, as the server counted them (else the pieces it streamed)."))
    if remote.get("client_ttft_s"):
        items.append(
            (
                f"first token {remote['client_ttft_s']:.2f} s measured here",
                "From sending the request to the first text, measured on this computer: the network and "
                "the server reading the prompt are both in it.",
            )
        )
    return items


def remote_summary(stats: AnswerStats) -> str:
    """The Details panel's lines for a remote answer."""
    remote = stats.remote
    lines = [remote_where(remote)[0]]
    if "source" in remote:
        words, tip = remote_speculation(remote)
        lines.append(words + (f" ({tip})" if words == NO_SERVER_FIGURES and tip else ""))
    if remote.get("server_tps"):
        lines.append(f"{remote['server_tps']:.1f} tok/s as the server measured it")
    if remote.get("client_tps"):
        lines.append(f"{remote['client_tps']:.1f} tok/s measured here")
    if remote.get("client_ttft_s"):
        lines.append(f"first token after {remote['client_ttft_s']:.2f} s measured here")
    lines.append("rounds are not reported by remote servers")
    return "<br>".join(lines)


def comparison_text(comparison: dict) -> str:
    speedup = comparison.get("measured_speedup", 0.0)
    parts = [
        f"Measured against plain decoding: <b>{speedup:.2f}×</b> "
        f"({comparison.get('spec_tps', 0):.1f} vs {comparison.get('plain_tps', 0):.1f} tok/s)"
    ]
    if comparison.get("identical"):
        parts.append("texts identical")
    else:
        where = comparison.get("first_difference")
        detail = f" from character {where + 1}" if isinstance(where, int) and where >= 0 else ""
        parts.append(f"texts differ{detail}")
        parts.append(SAMPLED_PARTING if comparison.get("temperature", 0) > 0 else GREEDY_PARTING)
    return " · ".join(parts)


# What greedy speculation guarantees, and what it does not (engine.bench_lossless measures it).
GREEDY_PARTING = (
    "at temperature 0 every token is still the model's top choice where it was computed, but verifying "
    "several tokens at once rounds differently from one at a time, so where two candidates nearly tie "
    "the choice can flip and the texts go their own ways"
)


# Above temperature 0 (sampling.Draws): the same seed draws the same tokens, drafted or not, but for two things.
SAMPLED_PARTING = (
    "above temperature 0 plain decoding draws with the answer's seed, and tokens drafted from the conversation, "
    "your history or your documents are kept only where they are that very draw; a draft model's tokens are "
    "kept by the rejection rule instead, which keeps the model's distribution but not each draw, and as at "
    "temperature 0, verifying several tokens at once rounds differently, which can tip a near tie"
)


def comparison_heading(comparison: dict) -> str:
    """The heading of the plain-decoding text shown beside an answer."""
    same = "the same text" if comparison.get("identical") else "a different text"
    return (
        f"Plain decoding (speculation off): {comparison.get('plain_tps', 0):.1f} tok/s, "
        f"{comparison.get('plain_tokens', 0)} tokens, {same}"
    )


def compare_texts(a: str, b: str) -> tuple[bool, int]:
    """(identical, index of the first differing character or -1)."""
    if a == b:
        return True, -1
    n = min(len(a), len(b))
    return False, next((i for i in range(n) if a[i] != b[i]), n)


def estimate_text(stats: AnswerStats) -> str:
    """The arithmetic behind the footer's estimate, with the very numbers that produce it."""
    if stats.plain_estimate_s > 0:
        plain = (
            f"Plain decoding ≈ {stats.plain_s:.3f} s (one single-token step per token, priced from each round's "
            "own measured verification time by this machine's step/batch cost ratio, never above what the answer's "
            "own plain steps took, plus what a plain step costs beyond it, as measured: sampling, the text, the "
            "window)"
        )
    else:  # an answer stored before rounds were priced: the calibrated step
        plain = (
            f"Plain decoding ≈ {stats.n_tokens} tokens × {stats.target_step_s * 1000:.1f} ms (the target's "
            f"measured single-token step) = {stats.plain_s:.3f} s"
        )
    return (
        f"{plain} ÷ {stats.gen_s:.3f} s generating = {stats.estimated_speedup:.2f}×. "
        "An estimate: Compare with plain decoding measures it."
    )


def results_cut_note(n: int) -> str:
    """The visible line under an answer whose model saw its tools' results with their middle left out."""
    what = "a tool's result" if n == 1 else f"{n} tools' results"
    return (
        f"The middle of {what} was left out of what the model saw: it did not fit the context "
        "(Settings → Context size)."
    )


def history_dropped_note(n: int) -> str:
    """The visible line under an answer that was written without the oldest messages."""
    what = "The oldest message was" if n == 1 else f"The {n} oldest messages were"
    return (
        f"{what} left out of what the model saw: the conversation no longer fits the context "
        "(Settings → Context size, or start a new chat)."
    )


def drafter_summary(stats: AnswerStats) -> str:
    tallies = stats.by_drafter()
    if not tallies:
        return "no rounds"
    lines = []
    # The draft length is what auto allowed; a drafter may draft fewer (its match ended, the answer would end,
    # the draft model grew unsure), so the accepted share is of the tokens drafted, said as such.
    for drafter in DrafterKind:
        t = tallies.get(drafter)
        if t is None:
            continue
        if drafter == DrafterKind.NONE:
            lines.append(f"{t.rounds} plain {'step' if t.rounds == 1 else 'steps'} (nothing drafted)")
            continue
        lines.append(
            f"{DRAFTER_LABELS[drafter]}: {t.rounds} {'round' if t.rounds == 1 else 'rounds'}, mean draft length {t.mean_draft_length:.1f}, "
            f"{t.accepted} of {t.drafted} drafted {'token' if t.drafted == 1 else 'tokens'} accepted ({t.acceptance_rate:.0%})"
        )
    return "<br>".join(lines)


def settings_summary(params: dict, stats: AnswerStats) -> str:
    sampling = params.get("sampling", {})
    spec = params.get("spec", {})
    parts = []
    if params.get("target"):
        parts.append(f"target {params['target']}" + (f", draft {params['draft']}" if params.get("draft") else ""))
    if sampling:
        parts.append(
            f"temperature {sampling.get('temperature')}, top-p {sampling.get('top_p')}, top-k {sampling.get('top_k')}, "
            f"min-p {sampling.get('min_p')}, seed {sampling.get('seed')}"
        )
    if spec:
        length = spec.get("draft_length") or "adaptive"
        parts.append(f"drafter mode {spec.get('mode')}, draft length {length}")
    if stats.backend:
        parts.append(f"backend {stats.backend}")
    return "<br>".join(parts) or "—"
