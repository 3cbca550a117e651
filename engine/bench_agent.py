"""`python -m engine.bench_agent`: what speculation is worth in an agent loop. A script, not a test.

The agent works on a small Python project through a real MCP server (engine.mcp.workspace_server, a
stdio subprocess started by McpHost, as the app starts the user's servers). Each task asks for a
docstring on one function, then a check that the file still compiles. The loop is scripted, as an
orchestrating agent scripts a small model: each pass is made to call one tool (read_file, then
edit_file, then run_check: tool_choice names it), the model writes the arguments, each result goes back
as a tool message, and a last pass without tools is its answer. The files are put back before every loop.

The tasks are one loop replayed with small variations (another function, another file). Per repeat the
history index starts empty: the first task is a first loop, nothing of it seen before; the tasks after it
are repeated loops, which auto may draft from the earlier loops' steps (history) as well as from the
tool results in their own prompt (lookup: edit_file quotes the file that read_file returned).

Three configurations, interleaved per task and repeat: plain (no drafting, tool grammar on), auto (as
the app runs it: every drafter, history on, tool grammar on; only its loops are remembered) and plain
without the tool grammar. At temperature 0 plain and auto take the same steps (lossless), so steps
compare one to one; at 0.7 the loops may differ, and only whole loops compare.

Reported: per step (temperature 0) tokens, decode tok/s, speedup, the share drafted by lookup and by
history, acceptance; per task and temperature the loop's speedup (median over repeats); tool-call
validity (parsed calls / calls attempted) with and without the grammar. Prints tables and writes JSON.
Timings mean something only on a quiet machine.

--costs frozen|gpu --calibration earlier.json prices every round at fixed costs instead of the wall clock,
as engine.bench does (see its docstring): a pass's time is the sum of its rounds' simulated times, so a
loop's speed says what the choices are worth at those costs. With the calibration of another machine (a
Xeon's JSON from engine.bench), the goal set on that machine is checked here. Grammar work, about 1 ms a
token for plain and auto alike, is not priced.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.bench import calibration_arg, costs_args, install_simulated_costs, round_seconds
from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.events import DoneEvent, RoundEvent
from engine.decoding.policy import CostModel
from engine.llama import cpu_weights
from engine.models import starter
from engine.tools import ToolChoice, ToolChoiceMode, ToolSpec

# Which tool each pass calls (tool_choice names it, as an orchestrating agent does); the model writes the
# arguments, and the last pass (no tools) is its answer.
SCRIPT = ("read_file", "edit_file", "run_check", None)
SERVER = "workspace"
SYSTEM = (
    "You are a coding agent with tools that read, search, edit and check the files of the user's project. "
    "You cannot see the files: call read_file to read one. Call one tool at a time and wait for its result. "
    "To edit, call edit_file with old_text copied exactly from the file. After an edit, call run_check on the "
    "file. Only when run_check says ok, reply with one sentence saying what you changed."
)
PROJECT = {
    "shop/cart.py": '''"""A shopping cart: items and their quantities."""


def add_item(cart, name, quantity=1):
    cart[name] = cart.get(name, 0) + quantity
    return cart


def remove_item(cart, name):
    if name in cart:
        del cart[name]
    return cart


def total_price(cart, prices):
    return sum(prices[name] * quantity for name, quantity in cart.items())
''',
    "shop/inventory.py": '''"""Stock levels of the shop."""


def in_stock(stock, name):
    return stock.get(name, 0) > 0


def restock(stock, name, quantity):
    stock[name] = stock.get(name, 0) + quantity
    return stock
''',
}
# (file, function): the first is the first loop, the others replay it with a small variation.
TASKS = [("shop/cart.py", "total_price"), ("shop/cart.py", "remove_item"), ("shop/inventory.py", "restock")]
CONFIGS = {
    "plain": (SpecParams(mode=DrafterMode.OFF), True),
    "auto": (SpecParams(mode=DrafterMode.AUTO), True),
    "plain-no-grammar": (SpecParams(mode=DrafterMode.OFF), False),
}


def task_prompt(path: str, function: str) -> str:
    return (
        f"Add a one-line docstring to the function `{function}` in {path}, saying what it does. "
        f"First read {path} with read_file. Then call edit_file on it: old_text is the line that defines "
        f"`{function}`, copied exactly, and new_text is that line followed by the docstring, indented. "
        f"Then call run_check on {path}."
    )


def write_project(root: Path) -> None:
    for relative, text in PROJECT.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@dataclass
class Step:
    n_tokens: int
    gen_s: float
    decode_tps: float
    n_drafted: int
    n_accepted: int
    from_lookup: int
    from_history: int
    from_draft: int
    calls: list[str]
    n_malformed: int
    grammar_s: float


def run_loop(
    engine: Engine, host, tools: list[ToolSpec], prompt: str, sampling, spec, grammar, remember, simulated=None
) -> list[Step]:
    """One agent loop: a pass of the model per scripted step, each call's result fed back.
    simulated: a CostModel that times each pass instead of the wall clock."""
    messages = [ChatMessage("system", SYSTEM), ChatMessage("user", prompt)]
    steps = []
    for name in SCRIPT:
        choice = ToolChoice(ToolChoiceMode.FUNCTION, name) if name else ToolChoice(ToolChoiceMode.NONE)
        done, rounds = None, []
        for event in engine.chat(
            messages,
            sampling,
            spec,
            tools=tools,
            tool_choice=choice,
            tool_grammar=grammar,
            parallel_tool_calls=False,
            remember=remember,
        ):
            if isinstance(event, RoundEvent):
                rounds.append(event)
            done = event
        assert isinstance(done, DoneEvent), done
        s = done.stats
        gen_s = pass_seconds(rounds, simulated) if simulated is not None else s.gen_s
        steps.append(
            Step(
                n_tokens=s.n_tokens,
                gen_s=gen_s,
                decode_tps=s.n_tokens / gen_s if gen_s > 0 else 0.0,
                n_drafted=s.n_drafted,
                n_accepted=s.n_accepted,
                from_lookup=s.tokens_by_source.get("lookup", 0),
                from_history=s.tokens_by_source.get("history", 0),
                from_draft=s.tokens_by_source.get("draft", 0),
                calls=[c.name for c in done.tool_calls],
                n_malformed=len(done.malformed_calls),
                grammar_s=s.grammar_s,
            )
        )
        messages.append(ChatMessage("assistant", done.text, tool_calls=done.tool_calls))
        for call in done.tool_calls:
            messages.append(ChatMessage("tool", call_tool(host, call), tool_call_id=call.id, name=call.name))
    return steps


def pass_seconds(rounds: list[RoundEvent], costs: CostModel) -> float:
    """A pass's decoding time in simulated seconds: all its rounds, as AnswerStats.gen_s counts them."""
    return sum(round_seconds(event, costs) for event in rounds)


def call_tool(host, call) -> str:
    from engine.mcp import McpError

    try:
        return host.call(SERVER, call.name, call.arguments, timeout=60).text
    except McpError as e:  # a refused edit is a result the model reads, as in the app
        return f"Error: {e}"


def loop_tps(steps: list[dict]) -> float:
    seconds = sum(s["gen_s"] for s in steps)
    return sum(s["n_tokens"] for s in steps) / seconds if seconds else 0.0


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else 0.0


def summarise(loops: list[dict], repeats: int) -> dict:
    """Per task and temperature: the loop's speedup of auto over plain (per repeat, then the median);
    per step at temperature 0 where plain and auto took the same steps; validity per grammar setting."""
    by_task, by_step = [], []
    for temperature in sorted({loop["temperature"] for loop in loops}):
        for task in range(len(TASKS)):

            def of(config: str, repeat: int, temperature=temperature, task=task) -> dict:
                return next(
                    x
                    for x in loops
                    if (x["temperature"], x["task"], x["config"], x["repeat"]) == (temperature, task, config, repeat)
                )

            pairs = [(of("plain", r), of("auto", r)) for r in range(repeats)]
            ratios = [loop_tps(a["steps"]) / loop_tps(p["steps"]) for p, a in pairs if loop_tps(p["steps"])]
            auto_steps = [s for _, a in pairs for s in a["steps"]]
            tokens = sum(s["n_tokens"] for s in auto_steps) or 1
            by_task.append(
                {
                    "temperature": temperature,
                    "task": task,
                    "kind": "first" if task == 0 else "repeated",
                    "steps": statistics.median(len(a["steps"]) for _, a in pairs),
                    "plain_tps": statistics.median(loop_tps(p["steps"]) for p, _ in pairs),
                    "auto_tps": statistics.median(loop_tps(a["steps"]) for _, a in pairs),
                    "speedup": statistics.median(ratios) if ratios else 0.0,
                    "speedup_range": [min(ratios), max(ratios)] if ratios else [],
                    "lookup_share": sum(s["from_lookup"] for s in auto_steps) / tokens,
                    "history_share": sum(s["from_history"] for s in auto_steps) / tokens,
                    "draft_share": sum(s["from_draft"] for s in auto_steps) / tokens,
                    "acceptance": sum(s["n_accepted"] for s in auto_steps)
                    / max(sum(s["n_drafted"] for s in auto_steps), 1),
                    "same_steps": all(
                        [s["calls"] for s in p["steps"]] == [s["calls"] for s in a["steps"]] for p, a in pairs
                    ),
                }
            )
            if temperature == 0.0:
                for number in range(max(len(a["steps"]) for _, a in pairs)):
                    same = [(p, a) for p, a in pairs if len(p["steps"]) > number and len(a["steps"]) > number]
                    if not same:
                        continue
                    p_steps = [p["steps"][number] for p, _ in same]
                    a_steps = [a["steps"][number] for _, a in same]
                    n = sum(s["n_tokens"] for s in a_steps) or 1
                    by_step.append(
                        {
                            "task": task,
                            "step": number + 1,
                            "calls": ",".join(a_steps[0]["calls"]) or "(answer)",
                            "tokens": statistics.median(s["n_tokens"] for s in a_steps),
                            "plain_tps": statistics.median(s["decode_tps"] for s in p_steps),
                            "auto_tps": statistics.median(s["decode_tps"] for s in a_steps),
                            "speedup": statistics.median(
                                a["decode_tps"] / p["decode_tps"]
                                for p, a in zip(p_steps, a_steps, strict=True)
                                if p["decode_tps"]
                            ),
                            "lookup_share": sum(s["from_lookup"] for s in a_steps) / n,
                            "history_share": sum(s["from_history"] for s in a_steps) / n,
                            "acceptance": sum(s["n_accepted"] for s in a_steps)
                            / max(sum(s["n_drafted"] for s in a_steps), 1),
                        }
                    )
    validity = {}
    for name, grammar in (("with grammar", True), ("without grammar", False)):
        steps = [s for x in loops if CONFIGS[x["config"]][1] == grammar for s in x["steps"]]
        if not steps:  # plain-no-grammar was left out
            continue
        parsed = sum(len(s["calls"]) for s in steps)
        attempted = parsed + sum(s["n_malformed"] for s in steps)
        grammar_s = sum(s["grammar_s"] for s in steps)
        validity[name] = {
            "parsed": parsed,
            "attempted": attempted,
            "validity": parsed / attempted if attempted else 1.0,
            "grammar_ms_per_token": 1000 * grammar_s / max(sum(s["n_tokens"] for s in steps), 1),
        }
    overall = {}
    for temperature in sorted({t["temperature"] for t in by_task}):
        rows = [t for t in by_task if t["temperature"] == temperature]
        overall[str(temperature)] = {
            "first": geomean([t["speedup"] for t in rows if t["kind"] == "first"]),
            "repeated": geomean([t["speedup"] for t in rows if t["kind"] == "repeated"]),
        }
    return {"by_task": by_task, "by_step": by_step, "validity": validity, "overall": overall}


def print_report(summary: dict, models: str, args) -> None:
    print(f"# {platform.platform()}; {cpu_weights.cpu_features()}")
    print(f"# {models}; up to {args.max_tokens} tokens a pass; {args.repeats} interleaved repeats")
    print("\n## Per step, temperature 0 (auto and plain take the same steps); medians over repeats")
    print(
        f"{'task':>4} {'step':>4} {'call':12} {'tokens':>6} {'plain t/s':>9} {'auto t/s':>8} {'speedup':>7}"
        f" {'lookup':>6} {'history':>7} {'accept':>6}"
    )
    for r in summary["by_step"]:
        print(
            f"{r['task']:4d} {r['step']:4d} {r['calls'][:12]:12} {r['tokens']:6.0f} {r['plain_tps']:9.1f}"
            f" {r['auto_tps']:8.1f} {r['speedup']:6.2f}x {r['lookup_share']:6.0%} {r['history_share']:7.0%}"
            f" {r['acceptance']:6.0%}"
        )
    print("\n## Per loop: decode tok/s over the loop's passes; speedup = auto over plain in the same repeat")
    print(
        f"{'T':>4} {'task':>4} {'kind':9} {'steps':>5} {'plain t/s':>9} {'auto t/s':>8} {'speedup':>7} {'range':>11}"
        f" {'lookup':>6} {'history':>7} {'draft':>6} {'accept':>6} same"
    )
    for r in summary["by_task"]:
        spread = "-".join(f"{x:.2f}" for x in r["speedup_range"])
        print(
            f"{r['temperature']:4.1f} {r['task']:4d} {r['kind']:9} {r['steps']:5.0f} {r['plain_tps']:9.1f}"
            f" {r['auto_tps']:8.1f} {r['speedup']:6.2f}x {spread:>11} {r['lookup_share']:6.0%}"
            f" {r['history_share']:7.0%} {r['draft_share']:6.0%} {r['acceptance']:6.0%} {r['same_steps']}"
        )
    print("\n## Overall (geometric mean of the loops' speedups)")
    for temperature, o in summary["overall"].items():
        print(f"T={temperature}: first loop {o['first']:.2f}x, repeated loops {o['repeated']:.2f}x")
    print("\n## Tool-call validity (parsed calls / calls attempted), every configuration and temperature")
    for name, v in summary["validity"].items():
        print(
            f"{name:16} {v['parsed']}/{v['attempted']} = {v['validity']:.0%};"
            f" grammar {v['grammar_ms_per_token']:.2f} ms a token"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target GGUF (default: the starter target)")
    parser.add_argument("--draft", help="draft GGUF (default: the starter draft)")
    parser.add_argument("--max-tokens", type=int, default=192, help="per pass of the model")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, of: %(default)s")
    costs_args(parser)
    parser.add_argument("--json", default="bench_agent.json")
    args = parser.parse_args(argv)
    frozen = calibration_arg(parser, args)
    configs = [c for c in args.configs.split(",") if c]
    if not {"plain", "auto"} <= set(configs) or any(c not in CONFIGS for c in configs):
        parser.error(f"--configs: plain, auto and any of {', '.join(CONFIGS)}")
    from engine.mcp import McpHost, ServerConfig

    target, draft = starter.pair_or_starter(args.model, args.draft)
    scratch = Path(tempfile.mkdtemp(prefix="specula-bench-agent-"))
    workspace = scratch / "project"
    workspace.mkdir()
    write_project(workspace)
    loops = []
    engine = Engine(ModelSpec(target), ModelSpec(draft) if draft else None, history_dir=scratch / "history")
    models = f"{engine.info.target_name} + {engine.info.draft_name}"
    simulated = install_simulated_costs(engine, args.costs, frozen)
    try:
        with McpHost() as host:
            server = ServerConfig(SERVER, sys.executable, ("-m", "engine.mcp.workspace_server", str(workspace)))
            tools = [ToolSpec.from_openai(info.as_openai()) for info in host.start(server)]
            for temperature in args.temperatures:
                for repeat in range(args.repeats):
                    engine.forget_history(None)  # each repeat's first loop is a first loop
                    for task, (path, function) in enumerate(TASKS):
                        for config in configs:  # interleaved: a slow moment hits all
                            spec, grammar = CONFIGS[config]
                            write_project(workspace)
                            sampling = SamplingParams(
                                temperature=temperature, max_tokens=args.max_tokens, seed=1234 + repeat
                            )
                            remember = 1 + 100 * repeat + task if config == "auto" else None
                            steps = run_loop(
                                engine,
                                host,
                                tools,
                                task_prompt(path, function),
                                sampling,
                                spec,
                                grammar,
                                remember,
                                simulated,
                            )
                            loops.append(
                                {
                                    "temperature": temperature,
                                    "repeat": repeat,
                                    "task": task,
                                    "config": config,
                                    "steps": [vars(s) for s in steps],
                                }
                            )
                            print(
                                f"T={temperature} repeat {repeat} task {task} {config}: "
                                + " > ".join(",".join(s.calls) or "answer" for s in steps)
                                + f" ({loop_tps([vars(s) for s in steps]):.1f} tok/s)",
                                flush=True,
                            )
    finally:
        engine.forget_history(None)
        engine.close()
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarise(loops, args.repeats)
    print()
    print_report(summary, models, args)
    result = {
        "machine": {"platform": platform.platform(), "cpu": cpu_weights.cpu_features()},
        "models": models,
        "max_tokens": args.max_tokens,
        "costs": args.costs,
        "simulated_calibration": simulated.calibration().as_dict() if simulated else None,
        **summary,
        "loops": loops,
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(f"\nJSON written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
