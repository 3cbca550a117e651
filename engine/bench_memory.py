"""What recurrent memory costs speculation, and what checkpoints save: `python -m engine.bench_memory --models A.gguf ...`.

Per model (a table, and JSON with --json):
- its memory kind and the size of one state checkpoint;
- a rejected round: the verify decode of [last, 4 drafts], keeping the checkpoint before it, and
  undoing it (restore, then re-evaluate the kept token), each the median of --rounds tries;
- the time to first token of turn 2 and of a regenerate, with checkpoints and without (then a
  recurrent model re-evaluates the whole conversation), and the tokens evaluated;
- with an MTP head: one head step, and following the target (per target token).

The tests' models come from llama.cpp's own generator (tests/synthetic_models.py, tests/mtp_fixture.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import llama_cpp

from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent
from engine.llama.memory import CheckpointKind
from engine.llama.runner import ModelRunner

PLAIN = SpecParams(mode=DrafterMode.OFF)


def rejected_round(runner: ModelRunner, rounds: int) -> dict:
    """Milliseconds of a round whose 4 drafts are all rejected, by part."""
    n = runner.n_vocab
    context = [(7 * i + 3) % n for i in range(64)]
    runner.eval(context, 0)
    verify, undo = [], []
    counters = runner.checkpoints.counters
    saves, restores = counters.save_s, counters.restore_s
    for i in range(rounds):
        last = (i * 5) % n
        draft = [(i + j) % n for j in range(1, 5)]
        t0 = time.perf_counter()
        runner.eval(context + [last] + draft, 5, checkpoint=CheckpointKind.ROUND)
        t1 = time.perf_counter()
        runner.eval(context + [last], 0)  # nothing accepted: back to the context and the target's token
        t2 = time.perf_counter()
        verify.append(t1 - t0)
        undo.append(t2 - t1)
        runner.truncate(len(context))
    runner.reset()
    return {
        "verify_ms": 1000 * statistics.median(verify),
        "undo_ms": 1000 * statistics.median(undo),
        "checkpoint_save_ms": 1000 * (counters.save_s - saves) / max(rounds, 1),
        "checkpoint_restore_ms": 1000 * (counters.restore_s - restores) / max(2 * rounds, 1),
    }


def turns(engine: Engine, checkpoints: bool, prompt_words: int) -> dict:
    """Time to first token of turn 2 and of a regenerate of it, after a first turn."""
    engine.reset_cache()
    budget = engine.target.checkpoints.budget_bytes
    engine.target.checkpoints.budget_bytes = budget if checkpoints else 0
    try:
        first = [ChatMessage("user", " ".join(f"tok_{i % 120}" for i in range(prompt_words)))]
        answer = _answer(engine, first)
        second = [*first, ChatMessage("assistant", answer.text), ChatMessage("user", "tok_3 tok_4 and then?")]
        turn2 = _answer(engine, second)
        again = _answer(engine, second)
    finally:
        engine.target.checkpoints.budget_bytes = budget
    return {
        "turn2_ttft_ms": 1000 * turn2.stats.ttft_s,
        "turn2_evaluated": turn2.stats.n_prompt_evaluated,
        "turn2_prompt": turn2.stats.n_prompt_tokens,
        "regenerate_ttft_ms": 1000 * again.stats.ttft_s,
        "regenerate_evaluated": again.stats.n_prompt_evaluated,
        "checkpoint_bytes": engine.target.checkpoints.nbytes,
    }


def _answer(engine: Engine, messages) -> DoneEvent:
    done = None
    for event in engine.chat(messages, SamplingParams(temperature=0.0, max_tokens=32), PLAIN):
        if isinstance(event, DoneEvent):
            done = event
    return done


def mtp_costs(engine: Engine, rounds: int) -> dict | None:
    head = engine.target.mtp
    if head is None:
        return None
    before = head.follow_s
    done = None
    ask = [ChatMessage("user", "tok_5 tok_9 " * 40)]
    for event in engine.chat(ask, SamplingParams(temperature=0.0, max_tokens=rounds), PLAIN):
        if isinstance(event, DoneEvent):
            done = event
    followed = done.stats.n_prompt_evaluated + done.stats.n_tokens
    return {
        "head_step_ms": 1000 * (engine.speculator.costs.mtp_step_s or 0.0),
        "follow_per_token_ms": 1000 * (head.follow_s - before) / max(followed, 1),
        "target_step_ms": 1000 * engine.speculator.costs.step_s,
    }


def snapshots(path: str, args) -> dict | None:
    """llama.cpp's alternative, per-token recurrent snapshots (n_rs_seq), where the architecture has
    them: the same rejected round, the context's memory, and whether going back 3 tokens decoded
    one at a time (a draft model's steps) gives a fresh context's logits."""
    spec = ModelSpec(path, n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads)
    runner = ModelRunner(spec, n_rs_seq=5)
    try:
        if llama_cpp.llama_n_rs_seq(runner._ctx) == 0:
            return None  # llama.cpp has no snapshots for this architecture
        result = rejected_round(runner, args.rounds)
        n = runner.n_vocab
        base = [(7 * i) % n for i in range(30)]
        for j in range(1, 6):
            runner.eval(base + [(11 * k) % n for k in range(j)], 1)
        back = base + [(11 * k) % n for k in range(2)] + [5]
        got = runner.eval(back, 1).copy()
        fresh = ModelRunner(spec)
        want = fresh.eval(back, 1).copy()
        fresh.close()
        result["exact_after_single_steps"] = bool((got == want).all())
        result["max_logit_error"] = float(abs(got - want).max())
        runner.eval([1, 2, 3, 4], 0)
        # llama.cpp keeps 1 + n_rs_seq copies of every recurrent state, all the time.
        result["snapshot_bytes"] = 5 * runner.checkpoints.state_bytes()
        return result
    finally:
        runner.close()


def measure(path: str, args) -> dict:
    spec = ModelSpec(path, n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads)
    engine = Engine(spec)
    try:
        runner = engine.target
        result = {
            "model": Path(path).name,
            "architecture": runner.info.architecture,
            "memory": runner.memory.value,
            "state_bytes": 0,
            "rollback_problem": runner.rollback_problem,
        }
        if runner.memory.needs_checkpoints:
            runner.eval([1, 2, 3, 4], 0)
            result["state_bytes"] = runner.checkpoints.state_bytes()
            runner.reset()
        result["round"] = rejected_round(runner, args.rounds)
        result["with_checkpoints"] = turns(engine, True, args.prompt_words)
        result["without_checkpoints"] = turns(engine, False, args.prompt_words)
        result["mtp"] = mtp_costs(engine, args.rounds)
        result["n_rs_seq"] = snapshots(path, args) if runner.memory.needs_checkpoints else None
        return result
    finally:
        engine.close()


def table(results: list[dict]) -> str:
    head = (
        f"{'model':28} {'memory':9} {'state':>9} {'verify5':>8} {'undo':>7} {'save':>6} {'restore':>7} "
        f"{'T2 ttft ckpt':>12} {'T2 no ckpt':>10} {'eval ckpt/no':>13} {'regen ckpt/no':>14} {'mtp step':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        rd, w, wo, m = r["round"], r["with_checkpoints"], r["without_checkpoints"], r["mtp"]
        lines.append(
            f"{r['model'][:28]:28} {r['memory']:9} {r['state_bytes'] / 1024:8.1f}K {rd['verify_ms']:7.2f}m "
            f"{rd['undo_ms']:6.2f}m {rd['checkpoint_save_ms']:5.3f} {rd['checkpoint_restore_ms']:7.3f} "
            f"{w['turn2_ttft_ms']:11.1f}m {wo['turn2_ttft_ms']:9.1f}m "
            f"{w['turn2_evaluated']:>6}/{wo['turn2_evaluated']:<6} "
            f"{w['regenerate_evaluated']:>6}/{wo['regenerate_evaluated']:<7} "
            + (f"{m['head_step_ms']:7.3f}m" if m else "       -")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, help="GGUF files")
    parser.add_argument("--rounds", type=int, default=40, help="rejected rounds timed per model")
    parser.add_argument("--prompt-words", type=int, default=300, help="the first turn's length")
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results = [measure(path, args) for path in args.models]
    print(table(results))
    print("(ms; verify5: one decode of [last + 4 drafts]; undo: back to the context after rejecting all four)")
    rs = [(r["model"], r["n_rs_seq"]) for r in results if r.get("n_rs_seq")]
    if rs:
        print("\nllama.cpp's per-token snapshots instead (n_rs_seq = 5):")
        for model, x in rs:
            print(
                f"{model[:28]:28} verify5 {x['verify_ms']:.2f} ms, undo {x['undo_ms']:.2f} ms, "
                f"snapshots {x['snapshot_bytes'] / 1024:.0f} K always allocated; "
                f"3 single steps back: {'exact' if x['exact_after_single_steps'] else 'WRONG STATE'} "
                f"(max logit error {x['max_logit_error']:.2g})"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
