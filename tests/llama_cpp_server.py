"""`python -m tests.llama_cpp_server ARGS`: llama-cpp-python's own OpenAI server, as
`python -m llama_cpp.server ARGS` starts it, with the CPU weight placement every Specula entry
point uses. On a Xeon with AMX, llama.cpp's defaults put the weights in its AMX buffer, and the
first batched decode (a prompt) dies with a general protection fault in libggml-cpu (llama.cpp
issue #20824); the server has no setting for buffer types, so its model is loaded as the engine
loads one: AMX avoided, CPU_REPACK kept. Elsewhere llama.cpp's defaults stand. The first line on
stderr says which; llama.cpp's "... model buffer size" lines follow (importing the engine routes
llama.cpp's log into Python logging, where this passes them on), so where the weights went is seen.
"""

from __future__ import annotations

import logging
import runpy
import sys

from engine.gguf.header import read_header
from engine.llama import cpu_weights


def main(args: list[str]) -> None:
    buffers = logging.StreamHandler(sys.stderr)
    buffers.addFilter(lambda record: "model buffer size" in record.getMessage())
    logging.getLogger("engine.llama").addHandler(buffers)
    logging.getLogger("engine.llama").setLevel(logging.DEBUG)
    header = read_header(args[args.index("--model") + 1])
    # The server's default n_gpu_layers is 0: every layer's weights are on the CPU.
    placement = cpu_weights.plan(header.tensors, header.n_layers or 0, 0, allow_amx=False)
    print(f"specula placement: {placement.summary}", file=sys.stderr, flush=True)
    sys.argv = ["llama_cpp.server", *args]
    with cpu_weights.llama_cpp_python_placed(placement):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
