"""`python -m engine.bench_history`: what drafting from the user's history is worth. A script, not a test.

Two parts:

1. A multi-conversation workload on real models. Earlier chats are answered first (and indexed,
   as the app does when an answer finishes); then five cases are measured with plain decoding,
   auto without the history index and auto with it, interleaved and repeated: regenerating an
   answer at T=0 and T=0.7, the same question asked again in a new chat, a follow-up edit of code
   written in an earlier chat, and a question unrelated to anything before. Ratios are decode
   tokens/s over plain's in the same repeat (bench.py's measure); the spread is the range over
   repeats. At T=0 the texts must be identical to plain's.
2. The index at scale: synthetic histories of 1M and 10M tokens (Zipf-distributed ids, documents
   of a few hundred tokens with repeated passages): the merge (sort) time, memory, disk, the
   lookup time per round and the time to add one answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.bench import rates, timed_tokens
from engine.config import ChatMessage, DrafterKind, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.history.store import HistoryIndex, disk_bytes
from engine.models import starter

CONFIGS = {
    "plain": SpecParams(mode=DrafterMode.OFF),
    "auto": SpecParams(mode=DrafterMode.AUTO, history=False),
    "auto+history": SpecParams(mode=DrafterMode.AUTO, history=True),
}

CODE_QUESTION = (
    "Write a Python function `slugify(title)` that turns a blog post title into a URL slug. Include a docstring."
)
# Earlier chats: (conversation id, turns). Their answers are what the history index learns.
EARLIER = [
    (1, [CODE_QUESTION]),
    (2, ["Write a SQL query that lists the ten customers with the highest total order value last month."]),
    (
        3,
        [
            "Write a short, polite e-mail to a colleague asking to move our Thursday meeting to Friday.",
            "Make it a bit more formal.",
        ],
    ),
    (4, ["Write a git commit message for a change that adds retry with backoff to the HTTP client."]),
    (5, ["Explain what a hash table is and why lookups are fast on average."]),
]
UNRELATED = "Give three tips for keeping houseplants alive in winter."


@dataclass
class Case:
    name: str
    messages: list[ChatMessage]
    temperature: float
    runs: dict[str, list[dict]] = field(default_factory=dict)


def answer(engine: Engine, messages, sampling, spec, remember=None) -> tuple[dict, str]:
    engine.reset_cache()
    t0 = time.perf_counter()
    stamps, done = timed_tokens(engine.chat(messages, sampling, spec, remember=remember), t0)
    tps = rates(stamps)[0]
    tally = done.stats.by_drafter()
    return {
        "tps": tps,
        "tokens": done.stats.n_tokens,
        "estimated": done.stats.estimated_speedup,
        "history_rounds": tally[DrafterKind.HISTORY].rounds if DrafterKind.HISTORY in tally else 0,
        "lookup_rounds": tally[DrafterKind.LOOKUP].rounds if DrafterKind.LOOKUP in tally else 0,
        "rounds": done.stats.n_rounds,
        "history_tokens": done.stats.tokens_by_source.get("history", 0),
    }, done.text


def build_history(engine: Engine, max_tokens: int) -> dict[int, list[ChatMessage]]:
    """Answer the earlier chats (T=0), remembering them; returns each chat's messages."""
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    chats = {}
    for conversation, turns in EARLIER:
        messages: list[ChatMessage] = []
        for turn in turns:
            messages.append(ChatMessage("user", turn))
            _, text = answer(engine, messages, sampling, CONFIGS["plain"], remember=conversation)
            messages.append(ChatMessage("assistant", text))
        chats[conversation] = messages
    return chats


def cases_from(chats: dict[int, list[ChatMessage]]) -> list[Case]:
    email = chats[3]
    code_answer = chats[1][1].content
    return [
        Case("regenerate T=0", email[:-1], 0.0),
        Case("regenerate T=0.7", email[:-1], 0.7),
        Case("ask again, new chat", [ChatMessage("user", CODE_QUESTION)], 0.0),
        Case(
            "edit earlier code",
            [
                ChatMessage(
                    "user",
                    "Earlier you wrote this for me:\n\n"
                    + code_answer
                    + "\n\nAdd type hints to the function and reply with the complete code.",
                )
            ],
            0.0,
        ),
        Case("unrelated", [ChatMessage("user", UNRELATED)], 0.0),
    ]


def run_workload(engine: Engine, args) -> dict:
    chats = build_history(engine, args.max_tokens)
    index = engine.history
    print(
        f"# history: {index.n_documents} documents, {index.n_tokens:,} tokens, {index.memory_bytes:,} bytes in memory"
    )
    cases = [c for c in cases_from(chats) if not args.cases or c.name in args.cases.split(",")]
    for repeat in range(args.repeats):
        for case in cases:
            sampling = SamplingParams(temperature=case.temperature, max_tokens=args.max_tokens, seed=args.seed + repeat)
            for config, spec in CONFIGS.items():  # interleaved: a slow moment hits every configuration
                run, text = answer(engine, case.messages, sampling, spec)
                run["text"] = text
                case.runs.setdefault(config, []).append(run)
    out = {}
    print(
        f"\n{'case':22} {'config':13} {'tok/s':>6} {'vs plain (range)':>20} {'est.':>6} {'hist rnds':>9} {'same text':>9}"
    )
    for case in cases:
        plain = case.runs["plain"]
        rows = {}
        for config, runs in case.runs.items():
            ratios = [r["tps"] / p["tps"] for r, p in zip(runs, plain, strict=True) if p["tps"]]
            same = all(r["text"] == p["text"] for r, p in zip(runs, plain, strict=True))
            rows[config] = {
                "tps": statistics.median(r["tps"] for r in runs),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "estimated": statistics.median(r["estimated"] for r in runs),
                "history_rounds": statistics.median(r["history_rounds"] for r in runs),
                "history_tokens": statistics.median(r["history_tokens"] for r in runs),
                "rounds": statistics.median(r["rounds"] for r in runs),
                "same_text_as_plain": same if case.temperature == 0 else None,
            }
            row = rows[config]
            spread = f"{row['ratio']:.2f}x ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
            same_text = "-" if case.temperature else ("yes" if same else "NO")
            print(
                f"{case.name:22} {config:13} {row['tps']:6.1f} {spread:>20} {row['estimated']:5.2f}x "
                f"{row['history_rounds']:9.0f} {same_text:>9}",
                flush=True,
            )
        out[case.name] = rows
    repeated = [out[c.name]["auto+history"]["ratio"] for c in cases if c.name != "unrelated"]
    goals = {}
    if repeated:
        goals["median auto+history / plain over repeated work (>= 1.4)"] = statistics.median(repeated)
    if "unrelated" in out:
        unrelated = out["unrelated"]
        goals["auto+history / plain on the unrelated case (>= 0.97)"] = unrelated["auto+history"]["ratio"]
        goals["auto+history / auto on the unrelated case"] = (
            unrelated["auto+history"]["ratio"] / unrelated["auto"]["ratio"]
        )
    goals["T=0 texts identical to plain (all cases)"] = all(
        rows["auto+history"]["same_text_as_plain"] in (True, None) for rows in out.values()
    )
    print("\n# Goals")
    for goal, value in goals.items():
        print(f"{goal:62} {value if isinstance(value, bool) else f'{value:.3f}'}")
    return {
        "history": {"documents": index.n_documents, "tokens": index.n_tokens, "memory_bytes": index.memory_bytes},
        "cases": out,
        "goals": goals,
    }


# -- the index at scale ------------------------------------------------------------------------


def synthetic_history(n_tokens: int, rng: np.random.Generator, n_vocab: int) -> list[np.ndarray]:
    """Documents of 100-600 Zipf-distributed ids; a third of them repeat a passage of an earlier one
    (people repeat themselves: that is what gives matches their length)."""
    docs, total = [], 0
    while total < n_tokens:
        length = int(rng.integers(100, 600))
        doc = (rng.zipf(1.3, length) % n_vocab).astype(np.int32)
        if docs and rng.random() < 0.33:
            source = docs[int(rng.integers(len(docs)))]
            start = int(rng.integers(0, max(1, len(source) - 50)))
            passage = source[start : start + int(rng.integers(20, 200))]
            at = int(rng.integers(0, length))
            doc = np.concatenate([doc[:at], passage, doc[at:]])[:length]
        docs.append(doc)
        total += len(doc) + 1
    return docs


def measure_scale(n_tokens: int, rng: np.random.Generator, n_vocab: int = 49_152) -> dict:
    docs = synthetic_history(n_tokens, rng, n_vocab)
    with tempfile.TemporaryDirectory() as tmp:
        index = HistoryIndex(Path(tmp) / "v", n_vocab, max_tokens=n_tokens * 2, tail_max=1 << 40)
        index.add_many(list(enumerate(docs)))
        tracemalloc.start()  # numpy reports its buffers to tracemalloc: the peak is the sort's working memory
        t0 = time.perf_counter()
        index.merge_now()  # sorts and writes the new generation
        merge_s = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        on_disk = disk_bytes(Path(tmp))
        t0 = time.perf_counter()
        reopened = HistoryIndex(Path(tmp) / "v", n_vocab, max_tokens=n_tokens * 2, tail_max=1 << 40)
        open_s = time.perf_counter() - t0
        # Lookups as rounds make them: the context's last 32 tokens, half inside a document.
        lookups = []
        for i in range(400):
            if i % 2:
                doc = docs[int(rng.integers(len(docs)))]
                end = int(rng.integers(8, len(doc)))
                context = doc[max(0, end - 32) : end].tolist()
            else:
                context = (rng.zipf(1.3, 32) % n_vocab).tolist()
            t0 = time.perf_counter()
            reopened.propose(context, 16, 3, 0.3)
            lookups.append(time.perf_counter() - t0)
        answer_tokens = (rng.zipf(1.3, 400) % n_vocab).tolist()
        t0 = time.perf_counter()
        reopened.add(10**9, answer_tokens)
        add_s = time.perf_counter() - t0
        lookups.sort()
        return {
            "tokens": index.n_tokens,
            "memory_bytes": index.memory_bytes,
            "disk_bytes": on_disk,
            "merge_s": merge_s,
            "merge_peak_bytes": peak,
            "open_s": open_s,
            "lookup_p50_us": lookups[len(lookups) // 2] * 1e6,
            "lookup_p99_us": lookups[int(0.99 * (len(lookups) - 1))] * 1e6,
            "add_answer_ms": add_s * 1000,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench_history", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target GGUF (default: the starter target)")
    parser.add_argument("--draft", help="draft GGUF (default: the starter draft)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--scale", default="1000000,10000000", help="synthetic history sizes in tokens ('' to skip)")
    parser.add_argument("--no-workload", action="store_true", help="only the index at scale")
    parser.add_argument("--cases", help="only these cases (comma-separated names, e.g. 'unrelated')")
    parser.add_argument("--history-dir", help="build the history here and keep it (default: a temporary folder)")
    parser.add_argument("--json", default="bench_history.json")
    args = parser.parse_args(argv)

    result: dict = {}
    if not args.no_workload:
        target, draft = starter.pair_or_starter(args.model, args.draft)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = args.history_dir or tmp
            spec = ModelSpec(target, n_ctx=4096, n_threads=args.threads)
            engine = Engine(
                spec, ModelSpec(draft, n_ctx=4096, n_threads=args.threads) if draft else None, history_dir=Path(tmp)
            )
            info = engine.info
            print(
                f"# {info.target_name} + {info.draft_name}; {info.placement()}, {info.n_threads} threads; "
                f"max {args.max_tokens} tokens, {args.repeats} interleaved repeats"
            )
            print(f"# {info.cpu_weights}")
            result["engine"] = {
                "target": info.target_name,
                "draft": info.draft_name,
                "placement": info.placement(),
                "cpu_weights": info.cpu_weights,
                "calibration": info.calibration.as_dict(),
            }
            result["workload"] = run_workload(engine, args)
            engine.close()
    scales = [int(s) for s in args.scale.split(",") if s]
    if scales:
        rng = np.random.default_rng(args.seed)
        print(
            f"\n{'tokens':>11} {'memory':>9} {'disk':>9} {'sort+save s':>8} {'merge peak':>10} {'open s':>7} "
            f"{'lookup P50':>10} {'P99 µs':>7} {'add ms':>7}"
        )
        result["scale"] = []
        for n in scales:
            row = measure_scale(n, rng)
            result["scale"].append(row)
            print(
                f"{row['tokens']:11,} {row['memory_bytes'] / 2**20:7.1f}MB {row['disk_bytes'] / 2**20:7.1f}MB "
                f"{row['merge_s']:8.2f} {row['merge_peak_bytes'] / 2**20:8.0f}MB {row['open_s']:7.2f} "
                f"{row['lookup_p50_us']:8.0f}µs {row['lookup_p99_us']:7.0f} {row['add_answer_ms']:7.2f}",
                flush=True,
            )
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
