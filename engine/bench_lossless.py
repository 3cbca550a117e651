"""`python -m engine.bench_lossless`: where speculation leaves plain decoding's text, and why.
A script, not a test.

At temperature 0 every emitted token is the argmax of the target's logits at its position, but
speculation computes those logits in batches of several tokens (the verification), plain decoding
one token at a time, and llama.cpp's kernels round differently by batch shape (activations are
quantized per block; sums run in another order). Where the top two logits nearly tie, the argmax
can flip, and from there the two texts go their own ways. This script runs each prompt plainly
and with each speculative mode, finds the first token where the texts part, and reports at that
position the gap between the two tokens in both runs' own logits (a near-tie: a fraction of a
logit) and how wide the batch was that decided it. Prints a table and writes JSON.

Above temperature 0 (--temperature, with --seed) each position draws with its key (sampling.Draws), so
the gaps are between the two tokens' keyed scores (log-probability plus the token's own noise), and a
parting has one of three causes: a near tie of those scores, a truncation edge (one row's top-k/top-p/
min-p keeps a token the other's cuts), or the rejection rule (a draft model's token kept by its
distribution, not as the keyed draw). --costs gpu prices rounds as a GPU would (engine.bench), so auto
and lookup draft as long as they would there, and batches are wider.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import resources

import numpy as np

from engine.bench import install_simulated_costs, load_prompts
from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.decoding.chat_engine import Engine
from engine.decoding.sampling import Draws, distribution, keyed_scores
from engine.llama import cpu_weights
from engine.models import starter

MODES = {
    "lookup": SpecParams(mode=DrafterMode.LOOKUP),
    "draft-k4": SpecParams(mode=DrafterMode.DRAFT_MODEL, draft_length=4, draft_p_min=0.0),
    "auto": SpecParams(mode=DrafterMode.AUTO),
}


class RowRecorder:
    """Wraps a runner's eval: the logits row at each position (the last eval covering it wins) and the
    width of the batch that computed it."""

    def __init__(self, runner):
        self.runner, self._eval = runner, runner.eval
        self.rows: dict[int, tuple[np.ndarray, int]] = {}

    def __call__(self, tokens, n_logits=1, **options):
        logits = self._eval(tokens, n_logits, **options)
        if logits is not None and n_logits > 0:
            first = len(tokens) - n_logits
            for i in range(n_logits):
                self.rows[first + i] = (np.array(logits[i], dtype=np.float32), n_logits)
        return logits


@dataclass
class Parting:
    prompt: str
    mode: str
    n_tokens: int  # tokens compared (the shorter answer)
    at: int | None = None  # the first answer token that differs (None: identical)
    plain_gap: float = 0.0  # plain's logit (T > 0: keyed score) of its token minus speculation's token's there
    spec_gap: float = 0.0  # the same in the speculative run's (batched) row; inf where the other token was cut
    spec_width: int = 0  # the width of the batch that computed the speculative row
    plain_rank: int = 0  # where speculation's token stood in plain's row (2: the runner-up)
    cause: str = ""  # near tie, truncation edge, or rejection rule (see the module's docstring)


def answer_rows(engine: Engine, message: str, sampling: SamplingParams, spec: SpecParams):
    """The committed answer tokens, the prompt length, and the recorded rows."""
    engine.reset_cache()
    recorder = RowRecorder(engine.target)
    engine.target.eval = recorder
    try:
        done = list(engine.chat([ChatMessage("user", message)], sampling, spec))[-1]
    finally:
        del engine.target.eval  # back to the class's method
    return list(engine.speculator.last_answer), done.stats.n_prompt_tokens, recorder.rows


def compare(prompt_id: str, mode: str, plain, spec, sampling: SamplingParams | None = None) -> Parting:
    """Where the two answers part and why. sampling: the answers' (None or greedy: temperature 0)."""
    (plain_tokens, n_prompt, plain_rows), (spec_tokens, _, spec_rows) = plain, spec
    n = min(len(plain_tokens), len(spec_tokens))
    at = next((i for i in range(n) if plain_tokens[i] != spec_tokens[i]), None)
    parting = Parting(prompt_id, mode, n, at)
    if at is None:
        return parting
    position = n_prompt + at - 1  # the row that predicts answer token `at`
    mine, theirs = plain_tokens[at], spec_tokens[at]
    plain_row, _ = plain_rows[position]
    spec_row, parting.spec_width = spec_rows[position]
    parting.plain_rank = int((plain_row > plain_row[theirs]).sum()) + 1
    if sampling is None or sampling.greedy:
        parting.plain_gap = float(plain_row[mine] - plain_row[theirs])
        parting.spec_gap = float(spec_row[theirs] - spec_row[mine])
        parting.cause = "near tie"
        return parting
    key = Draws(sampling.seed).at(position + 1)  # row i of a batch draws with the key of the position it predicts
    plain_p, spec_p = distribution(plain_row, sampling), distribution(spec_row, sampling)
    plain_scores = keyed_scores(plain_p, key, [mine, theirs])
    spec_scores = keyed_scores(spec_p, key, [mine, theirs])
    parting.plain_gap = float(plain_scores[0] - plain_scores[1])
    parting.spec_gap = float(spec_scores[1] - spec_scores[0])
    if spec_p.drawn_with(key) != theirs:
        parting.cause = "rejection rule"
    elif np.isinf([*plain_scores, *spec_scores]).any():
        parting.cause = "truncation edge"
    else:
        parting.cause = "near tie"
    return parting


def _finite(fields: dict) -> dict:
    """JSON has no infinity: a gap to a token the other row cut is written as null."""
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in fields.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench_lossless", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="target GGUF (default: the starter target)")
    parser.add_argument("--draft", help="draft GGUF (default: the starter draft)")
    parser.add_argument("--prompts-file", help="default: engine/data/heldout_prompts.json's prompts")
    parser.add_argument("--split", help="only the prompts of this split (tuning or check)")
    parser.add_argument("--prompts", help="only these prompt ids (comma-separated)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1234, help="above temperature 0: every answer's seed")
    parser.add_argument("--costs", choices=["measured", "gpu"], default="measured", help="gpu: price rounds as a GPU")
    parser.add_argument("--json", default="bench_lossless.json")
    args = parser.parse_args(argv)

    target, draft = starter.pair_or_starter(args.model, args.draft)
    engine = Engine(ModelSpec(target), ModelSpec(draft) if draft else None)
    if args.costs == "gpu":
        install_simulated_costs(engine, "gpu", None)
    heldout = str(resources.files("engine").joinpath("data/heldout_prompts.json"))
    prompts = [
        p
        for p in load_prompts(args.prompts_file or heldout)["prompts"]
        if (not args.split or p.get("split") == args.split) and (not args.prompts or p["id"] in args.prompts.split(","))
    ]
    modes = [m for m in args.modes.split(",") if m]
    print(f"# {engine.info.target_name} + {engine.info.draft_name}; {cpu_weights.cpu_features()}")
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)
    drawn = "" if sampling.greedy else f", seed {args.seed}"
    print(f"# {engine.info.cpu_weights}; {len(prompts)} prompts, {args.max_tokens} tokens")
    print(f"# temperature {args.temperature}{drawn}, {args.costs} costs")
    header = f"{'prompt':14} {'mode':9} {'tokens':>6} {'parts at':>8} {'plain gap':>9} {'spec gap':>8} {'width':>5}"
    print(f"{header} rank cause")
    partings: list[Parting] = []
    for prompt in prompts:
        plain = answer_rows(engine, prompt["message"], sampling, SpecParams(mode=DrafterMode.OFF))
        for mode in modes:
            spec = answer_rows(engine, prompt["message"], sampling, MODES[mode])
            p = compare(prompt["id"], mode, plain, spec, sampling)
            partings.append(p)
            line = f"{p.prompt:14} {p.mode:9} {p.n_tokens:6d}"
            if p.at is None:
                print(f"{line} {'-':>8} ", flush=True)
            else:
                gaps = f"{p.plain_gap:9.3f} {p.spec_gap:8.3f} {p.spec_width:5d} {p.plain_rank:4d} {p.cause}"
                print(f"{line} {p.at:>8} {gaps}", flush=True)
    parted = [p for p in partings if p.at is not None]
    summary = {
        "answers": len(partings),
        "parted": len(parted),
        "by_mode": {m: sum(1 for p in parted if p.mode == m) for m in modes},
        "by_cause": {c: sum(1 for p in parted if p.cause == c) for c in sorted({p.cause for p in parted})},
        "max_plain_gap": max((p.plain_gap for p in parted if np.isfinite(p.plain_gap)), default=0.0),
        "max_spec_gap": max((p.spec_gap for p in parted if np.isfinite(p.spec_gap)), default=0.0),
        "runner_up_every_time": all(p.plain_rank == 2 for p in parted),
    }
    print(f"\n{summary['parted']} of {summary['answers']} speculative answers parted from plain decoding: {summary}")
    result = {
        "machine": {"platform": platform.platform(), "cpu": cpu_weights.cpu_features()},
        "engine": {"cpu_weights": engine.info.cpu_weights, "target": engine.info.target_name},
        "temperature": args.temperature,
        "seed": None if sampling.greedy else args.seed,
        "costs": args.costs,
        "partings": [_finite(asdict(p)) for p in partings],
        "summary": summary,
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(f"JSON written to {args.json}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
