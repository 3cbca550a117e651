"""Run in a subprocess by tests/test_cpu_weights.py: load a model and decode batches of several
widths with the machine's default thread count, the path that crashed on AMX CPUs.

    python -m tests.batched_decode MODEL [decided|without-amx|plain] [LOGITS.npz]

decided: the engine's own choice (what every entry point uses); without-amx: the AMX-free
placement forced on any machine; plain: llama.cpp's extra buffer types all off. Prints one JSON
line: the placement, llama.cpp's weight buffer sizes, and the logits' argmax per width. LOGITS.npz,
when given, receives every row's whole logits per width ("w1", "w2", ...), to compare two
placements row by row.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from engine.config import ModelSpec
from engine.llama import cpu_weights
from engine.llama.runner import ModelRunner

WIDTHS = (1, 2, 3, 4, 8, 16, 33, 64)


def main(path: str, placement: str = "decided", save: str = "") -> None:
    if placement == "without-amx":
        cpu_weights.plan = lambda tensors, n_layers, n_gpu, _allow: cpu_weights.without_amx(tensors, n_layers, n_gpu)
    elif placement == "plain":
        cpu_weights.plan = lambda *_args: cpu_weights.WeightPlacement(False, summary="extra buffers off")
    runner = ModelRunner(ModelSpec(path, n_ctx=512, n_gpu_layers=0))  # the CPU's weight placement is the subject
    prompt = runner.tokenize("def fibonacci(n):\n    return")
    argmax, logits, rows = {}, {}, {}
    for width in WIDTHS:
        print(f"decoding {width} tokens", file=sys.stderr, flush=True)  # the last line before a crash
        out = runner.eval(prompt + [1000 + i for i in range(width)], width)
        argmax[width] = out.argmax(axis=1).tolist()
        rows[f"w{width}"] = np.array(out, dtype=np.float32)
        logits[width] = np.array(out[-1, :32], dtype=float).round(4).tolist()
        runner.truncate(len(prompt))
    if save:
        np.savez(save, **rows)
    print(
        json.dumps(
            {
                "summary": runner.weights.summary,
                "repacked": len(runner.weights.repack),
                "buffers": runner.weight_buffers,
                "threads": runner.n_threads,
                "argmax": argmax,
                "logits": logits,
            }
        )
    )
    runner.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
