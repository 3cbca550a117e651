"""`python -m engine.bench`: how much speculation is worth on this machine. A script, not a test.

Runs the shipped prompt set through several drafting configurations at temperature 0 and 0.7,
measures plain decoding through llama-cpp-python's own create_completion as the anchor, times
follow-up turns, and compares rejection sampling with sample-and-match. Prints a table per
prompt, a summary with the goals, and writes everything as JSON.

Every rate is measured the same way for every configuration, the anchor included: decode
tokens/s = (tokens - 1) / (time of last token - time of first token). Each run starts from an
empty KV cache so all pay the same prompt evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from engine.cli import gpu_layers_arg
from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, TokenEvent
from engine.llama import cpu_weights

CONFIGS: dict[str, SpecParams] = {
    "plain": SpecParams(mode=DrafterMode.OFF),
    "draft-k4": SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4, draft_p_min=0.0),
    "lookup": SpecParams(mode=DrafterMode.LOOKUP),
    # A target whose GGUF has MTP layers drafts with its own head (no draft model needed).
    "mtp-k4": SpecParams(mode=DrafterMode.MTP, draft_length=4, draft_p_min=0.0),
    "both": SpecParams(mode=DrafterMode.BOTH),
    "auto": SpecParams(mode=DrafterMode.AUTO),
    # With --history-dir: auto without the history index, to see what history adds or costs.
    "auto-nohistory": SpecParams(mode=DrafterMode.AUTO, history=False),
}


@dataclass
class Run:
    prompt: str
    config: str
    temperature: float
    n_tokens: int = 0
    decode_tps: float = 0.0
    ttft_s: float = 0.0
    itl_p50_ms: float = 0.0
    itl_p99_ms: float = 0.0
    acceptance: float = 0.0
    mean_accepted: float = 0.0
    n_drafted: int = 0
    drafters: dict = field(default_factory=dict)
    text: str = ""
    estimated: float = 0.0  # the speedup the answer's footer would show (AnswerStats.estimated_speedup)


def load_prompts(path: str | None = None) -> dict:
    """The shipped prompt set, or another file of the same shape (engine/data/heldout_prompts.json)."""
    if path:
        return json.loads(Path(path).read_text("utf-8"))
    return json.loads(resources.files("engine").joinpath("data/bench_prompts.json").read_text("utf-8"))


def timed_tokens(events, t_request: float) -> tuple[list[float], DoneEvent]:
    stamps, done = [], None
    for event in events:
        if isinstance(event, TokenEvent):
            stamps.append(time.perf_counter() - t_request)
        elif isinstance(event, DoneEvent):
            done = event
    return stamps, done


def rates(stamps: list[float]) -> tuple[float, float, float]:
    """(decode tok/s, P50 ms, P99 ms) from token arrival times."""
    if len(stamps) < 2:
        return 0.0, 0.0, 0.0
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    p99 = gaps[min(len(gaps) - 1, int(round(0.99 * (len(gaps) - 1))))]
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), statistics.median(gaps) * 1000, p99 * 1000


def median_run(tries: list[Run]) -> Run:
    return sorted(tries, key=lambda r: r.decode_tps)[len(tries) // 2]


def run_engine(engine: Engine, prompt: dict, config: str, sampling: SamplingParams, spec: SpecParams) -> Run:
    engine.reset_cache()
    t0 = time.perf_counter()
    stamps, done = timed_tokens(engine.chat([ChatMessage("user", prompt["message"])], sampling, spec), t0)
    tps, p50, p99 = rates(stamps)
    drafters = {kind.value: tally.rounds for kind, tally in done.stats.by_drafter().items()}
    return Run(
        prompt["id"],
        config,
        sampling.temperature,
        done.stats.n_tokens,
        tps,
        stamps[0] if stamps else 0.0,
        p50,
        p99,
        done.stats.acceptance_rate,
        done.stats.mean_accepted_length,
        done.stats.n_drafted,
        drafters,
        done.text,
        done.stats.estimated_speedup,
    )


def run_anchor(llm, engine: Engine, prompt: dict, sampling: SamplingParams) -> Run:
    """Plain decoding through llama-cpp-python's create_completion, on the same prompt text."""
    text = engine.formatter.format([ChatMessage("user", prompt["message"])])
    llm.reset()
    t0 = time.perf_counter()
    stamps, pieces = [], []
    for chunk in llm.create_completion(
        text,
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        seed=sampling.seed,
        stream=True,
        repeat_penalty=1.0,
    ):
        stamps.append(time.perf_counter() - t0)
        pieces.append(chunk["choices"][0]["text"])
    tps, p50, p99 = rates(stamps)
    return Run(
        prompt["id"],
        "llama-cpp-python",
        sampling.temperature,
        len(stamps),
        tps,
        stamps[0] if stamps else 0,
        p50,
        p99,
        text="".join(pieces),
    )


def followup(engine: Engine, turns: list[str], max_tokens: int) -> dict:
    """Time to first token per turn of one conversation, with the cache reused across turns."""
    engine.reset_cache()
    messages: list[ChatMessage] = []
    out = []
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    for turn in turns:
        messages.append(ChatMessage("user", turn))
        t0 = time.perf_counter()
        stamps, done = timed_tokens(engine.chat(messages, sampling, SpecParams()), t0)
        messages.append(ChatMessage("assistant", done.text))
        out.append(
            {
                "ttft_s": stamps[0],
                "prompt_tokens": done.stats.n_prompt_tokens,
                "prompt_evaluated": done.stats.n_prompt_evaluated,
                "answer_tokens": done.stats.n_tokens,
            }
        )
    # The same last turn without the cache, to show what reuse saved.
    engine.reset_cache()
    t0 = time.perf_counter()
    stamps, _ = timed_tokens(engine.chat(messages[:-1], sampling.with_(max_tokens=4), SpecParams()), t0)
    return {
        "turns": out,
        "last_turn_cold_ttft_s": stamps[0],
        "ratio_turn6_to_turn1": out[-1]["ttft_s"] / out[0]["ttft_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target GGUF (default: the starter target)")
    parser.add_argument("--draft", help="draft GGUF (default: the starter draft)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--prompts", help="only these prompt ids (comma-separated)")
    parser.add_argument("--prompts-file", help="another prompt set (e.g. engine/data/heldout_prompts.json)")
    parser.add_argument("--split", help="only the prompts of this split (tuning or check)")
    parser.add_argument("--history-dir", help="open the user's history index from here (as the app does)")
    gpu_layers_arg(parser)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--allow-amx", action="store_true", help="let llama.cpp use AMX (crash-prone, see engine info)")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration and prompt; the median is kept")
    parser.add_argument("--no-anchor", action="store_true", help="skip llama-cpp-python's create_completion")
    parser.add_argument("--no-followup", action="store_true")
    parser.add_argument("--no-match", action="store_true", help="skip rejection vs sample-and-match")
    parser.add_argument("--json", default="bench.json", help="where to write the JSON results")
    args = parser.parse_args(argv)

    target, draft = args.model, args.draft
    if target is None:
        from engine.models import starter

        target_path, draft_path = starter.assemble_pair()
        target, draft = str(target_path), draft or str(draft_path)
    spec_common = dict(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads, allow_amx=args.allow_amx)
    engine = Engine(
        ModelSpec(target, **spec_common),
        ModelSpec(draft, **spec_common) if draft else None,
        history_dir=Path(args.history_dir) if args.history_dir else None,
    )
    data = load_prompts(args.prompts_file)
    prompts = [p for p in data["prompts"] if not args.prompts or p["id"] in args.prompts.split(",")]
    prompts = [p for p in prompts if not args.split or p.get("split") == args.split]
    configs = [c for c in args.configs.split(",") if c]
    if engine.target.mtp is None and "mtp-k4" in configs:
        configs.remove("mtp-k4")
        print(f"# mtp-k4 skipped: the target has no MTP head ({engine.target.mtp_problem or 'none in its file'})")
    info = engine.info
    print(
        f"# {info.target_name} + {info.draft_name}; {info.placement()}, {info.n_threads} threads; "
        f"{len(prompts)} prompts, max {args.max_tokens} tokens, {args.repeats} run(s) each",
        flush=True,
    )
    print(f"# {info.cpu_weights}", flush=True)
    print(f"# calibration: {info.calibration.as_dict()}", flush=True)

    llm = None
    if not args.no_anchor:
        from llama_cpp import Llama

        with cpu_weights.llama_cpp_python_placed(engine.target.weights):
            llm = Llama(
                target,
                n_ctx=args.ctx,
                n_threads=engine.target.n_threads,
                n_threads_batch=engine.target.n_threads,
                n_gpu_layers=engine.target.gpu_layers,  # what auto gave the engine's target
                n_batch=512,
                verbose=False,
            )

    runs: list[Run] = []
    for temperature in args.temperatures:
        sampling = SamplingParams(temperature=temperature, max_tokens=args.max_tokens, seed=args.seed)
        for prompt in prompts:
            # Repeats are interleaved (every configuration once, then again) so a slow stretch
            # of the machine hits all of them alike; each configuration's median run is kept.
            tries: dict[str, list[Run]] = {}
            for _ in range(args.repeats):
                if llm is not None:
                    tries.setdefault("llama-cpp-python", []).append(run_anchor(llm, engine, prompt, sampling))
                for c in configs:
                    tries.setdefault(c, []).append(run_engine(engine, prompt, c, sampling, CONFIGS[c]))
            rows = [median_run(t) for t in tries.values()]
            runs += rows
            print_prompt_table(prompt["id"], temperature, rows)

    match = None
    if not args.no_match and engine.draft is not None:
        match = compare_match(engine, prompts, args)
    follow = (
        None
        if args.no_followup or "followup_conversation" not in data
        else followup(engine, data["followup_conversation"], 400)
    )
    summary = summarise(runs, prompts, configs, match, follow)
    print_summary(summary)
    result = {
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0], "cpus": os.cpu_count()},
        "engine": asdict(info),
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "runs": [r.__dict__ for r in runs],
        "sample_and_match": match,
        "followup": follow,
        "summary": summary,
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"\nJSON written to {args.json}")
    if llm is not None:
        llm.close()
    engine.close()
    return 0


def compare_match(engine: Engine, prompts: list[dict], args) -> dict:
    """Mean accepted length of the draft model at T=0.7: rejection rule vs sample-and-match."""
    sampling = SamplingParams(temperature=0.7, max_tokens=args.max_tokens, seed=args.seed)
    base = SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4, draft_p_min=0.0)
    out = {}
    for rule, spec in (("rejection", base), ("sample-and-match", base.with_(sample_and_match=True))):
        lengths = [run_engine(engine, p, rule, sampling, spec) for p in prompts]
        out[rule] = {
            "mean_accepted_length": statistics.mean(r.mean_accepted for r in lengths),
            "acceptance": statistics.mean(r.acceptance for r in lengths),
            "per_prompt": {r.prompt: r.mean_accepted for r in lengths},
        }
    return out


def summarise(runs: list[Run], prompts: list[dict], configs: list[str], match, follow) -> dict:
    def rate(prompt, config, temp):
        return next((r.decode_tps for r in runs if (r.prompt, r.config, r.temperature) == (prompt, config, temp)), None)

    temps = sorted({r.temperature for r in runs})
    speedups: dict[str, dict[str, list[float]]] = {}
    for temp in temps:
        for config in configs:
            key = f"{config}@T{temp:g}"
            speedups[key] = {}
            for p in prompts:
                plain, this = rate(p["id"], "plain", temp), rate(p["id"], config, temp)
                if plain and this:
                    speedups[key][p["id"]] = this / plain
    anchor = {}
    for temp in temps:
        ratios = [
            rate(p["id"], "plain", temp) / rate(p["id"], "llama-cpp-python", temp)
            for p in prompts
            if rate(p["id"], "llama-cpp-python", temp) and rate(p["id"], "plain", temp)
        ]
        if ratios:
            anchor[f"T{temp:g}"] = {"median": statistics.median(ratios), "min": min(ratios)}
    # How far the footer's estimate is from the measured ratio: estimate / measured - 1, per prompt.
    estimate_error: dict[str, dict[str, float]] = {}
    for temp in temps:
        for config in configs:
            if config == "plain":
                continue
            errors = {}
            for p in prompts:
                run = next((r for r in runs if (r.prompt, r.config, r.temperature) == (p["id"], config, temp)), None)
                measured = speedups.get(f"{config}@T{temp:g}", {}).get(p["id"])
                if run and measured:
                    errors[p["id"]] = run.estimated / measured - 1
            estimate_error[f"{config}@T{temp:g}"] = errors
    copy_ids = [p["id"] for p in prompts if p.get("copy_heavy")]
    goals = {}
    if anchor:
        goals["plain >= 0.95x create_completion (median)"] = min(v["median"] for v in anchor.values())
    auto = [v for k, d in speedups.items() if k.startswith("auto@") for v in d.values()]
    if auto:
        goals["auto >= 0.97x plain on every prompt (min)"] = min(auto)
    copy = [speedups.get(f"auto@T{t:g}", {}).get(i) for t in temps for i in copy_ids]
    copy = [c for c in copy if c]
    if copy:
        goals["auto >= 1.25x plain on copy-heavy prompts (median)"] = statistics.median(copy)
    if follow:
        goals["TTFT turn 6 <= 1.5x turn 1"] = follow["ratio_turn6_to_turn1"]
    if match:
        goals["rejection mean accepted >= sample-and-match"] = (
            match["rejection"]["mean_accepted_length"] - match["sample-and-match"]["mean_accepted_length"]
        )
    auto_errors = [abs(v) for k, d in estimate_error.items() if k.startswith("auto@") for v in d.values()]
    if auto_errors:
        goals["auto: |estimate / measured - 1| <= 0.10 on every prompt (max)"] = max(auto_errors)
    return {
        "speedup_vs_plain": speedups,
        "estimate_error": estimate_error,
        "plain_vs_create_completion": anchor,
        "goals": goals,
    }


def print_prompt_table(prompt_id: str, temperature: float, rows: list[Run]) -> None:
    plain = next((r.decode_tps for r in rows if r.config == "plain"), None)
    print(f"\n## {prompt_id} @ T={temperature:g}")
    print(
        f"{'config':18} {'tok':>4} {'tok/s':>7} {'vs plain':>8} {'accept':>7} {'mean acc':>8} "
        f"{'TTFT ms':>8} {'P50 ms':>7} {'P99 ms':>7}  drafters"
    )
    for r in rows:
        vs = f"{r.decode_tps / plain:7.2f}x" if plain else "       -"
        drafters = ",".join(f"{k}:{v}" for k, v in r.drafters.items())
        print(
            f"{r.config:18} {r.n_tokens:4d} {r.decode_tps:7.1f} {vs:>8} {r.acceptance:7.0%} {r.mean_accepted:8.2f} "
            f"{r.ttft_s * 1000:8.0f} {r.itl_p50_ms:7.1f} {r.itl_p99_ms:7.1f}  {drafters}",
            flush=True,
        )


def print_summary(summary: dict) -> None:
    print("\n# Speedup over plain (decode tok/s ratio, same run)")
    for key, per_prompt in summary["speedup_vs_plain"].items():
        if per_prompt:
            values = list(per_prompt.values())
            print(
                f"{key:20} median {statistics.median(values):5.2f}x  min {min(values):5.2f}x  max {max(values):5.2f}x"
            )
    print("\n# Estimate under the answer vs measured ratio (estimate / measured - 1)")
    for key, per_prompt in summary.get("estimate_error", {}).items():
        if per_prompt:
            values = sorted(per_prompt.values())
            print(f"{key:20} median {statistics.median(values):+6.1%}  min {values[0]:+6.1%}  max {values[-1]:+6.1%}")
    for temp, v in summary["plain_vs_create_completion"].items():
        print(f"plain vs create_completion @{temp}: median {v['median']:.3f}x, min {v['min']:.3f}x")
    print("\n# Goals")
    for goal, value in summary["goals"].items():
        print(f"{goal:55} {value:8.3f}")


if __name__ == "__main__":
    sys.exit(main())
