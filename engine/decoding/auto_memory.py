"""What auto learned of each drafter's acceptance, kept across restarts (Speculator.memory / recall).

One small JSON file on this computer (engine.paths.auto_memory_file), an entry per target, draft
and backend: how often a draft model's tokens are accepted depends on the pair, and a draft model
auto never tried would otherwise be rediscovered, probe by probe, after every start. Costs are
measured at every load, except what a token of context adds to a decode (CONTEXT_MEMORY): that is
learned from rounds at long contexts, so it is kept too. A missing, damaged or foreign file means
starting from the priors, never an error; a file that cannot be written is logged and the answer goes
on.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from engine.decoding.policy import describe_attention
from engine.json_file import write_json

log = logging.getLogger(__name__)

VERSION = 1
CONTEXT_MEMORY = "context"  # the entry for CostModel.attention_s, beside the drafters'
MAX_PAIRS = 32  # entries kept, the most recently used first


def pair_key(target: str, draft: str | None, backend: str) -> str:
    """The entry for these models: file names and sizes (a re-download of the same file keeps it)."""

    def name(path: str | None) -> str:
        if not path:
            return "-"
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        return f"{Path(path).name}:{size}"

    return f"{name(target)} | {name(draft)} | {backend}"


def _entries(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("pairs"), dict):
        return {}
    return {k: v for k, v in data["pairs"].items() if isinstance(v, dict)}


def load(path: Path, key: str) -> dict:
    """The memory kept for key ({} when there is none or the file cannot be read)."""
    return _entries(path).get(key, {})


def save(path: Path, key: str, memory: dict) -> None:
    """Keep memory for key beside the other pairs' (the least recently used beyond MAX_PAIRS dropped)."""
    pairs = {key: memory} | {k: v for k, v in _entries(path).items() if k != key}
    try:
        write_json(path, {"version": VERSION, "pairs": dict(list(pairs.items())[:MAX_PAIRS])})
    except OSError as e:
        log.warning("auto's memory was not saved to %s: %s", path, e)


def describe(memory: dict) -> list[str]:
    """What the memory says, a line per drafter and match band: "draft-model: first token accepted 0.82, ..."."""
    lines = []
    for kind, bands in sorted(memory.items()):
        if kind == CONTEXT_MEMORY:
            lines += _describe_context(bands)
            continue
        for band, counts in sorted(bands.items(), key=lambda item: (len(item[0]), item[0])):
            try:
                (first_yes, first_no), (next_yes, next_no) = counts["first"], counts["next"]
                seen = int(counts.get("seen", 0))
            except (KeyError, TypeError, ValueError):
                continue
            if seen <= 0:  # a band never seen says nothing
                continue
            where = "" if band == "-" else f" (matches of {band}{'+' if int(band) >= 4 else ''} tokens)"
            lines.append(
                f"{kind}{where}: first token accepted {_share(first_yes, first_no)}, "
                f"the next ones {_share(next_yes, next_no)} (seen in {seen} {'round' if seen == 1 else 'rounds'})"
            )
            if isinstance(counts.get("rounds"), dict):
                lines += _describe_rounds(kind, counts["rounds"])
    return lines


def _share(yes: float, no: float) -> str:
    """yes / (yes + no) to two places, or "not yet seen" where both are 0."""
    return f"{yes / (yes + no):.2f}" if yes + no > 0 else "not yet seen"


def _describe_context(context) -> list[str]:
    """The learned cost of context, in words; [] if malformed."""
    try:
        seconds = float(context["attention_s"])
    except (KeyError, TypeError, ValueError):
        return []
    return [f"context: {describe_attention(seconds)}"]


def _describe_rounds(kind: str, rounds: dict) -> list[str]:
    """A model drafter's rounds at temperature 0 (policy.RoundShape.counts), in words; [] if malformed."""
    try:
        weights = {int(n): float(w) for n, w in rounds["lengths"].items()}
        steps, accepted = float(rounds["steps"]), float(rounds["accepted"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    total = sum(weights.values())
    if total <= 0:
        return []
    drafted = sum(n * w for n, w in weights.items()) / total
    return [
        f"{kind} at temperature 0: {drafted:.1f} tokens drafted a round in {steps / total:.1f} steps, "
        f"{accepted / total:.1f} accepted"
    ]
