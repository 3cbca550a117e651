"""A bounded load run: N concurrent streaming clients, a fixed number of requests each, on loopback.

    python -m engine.serving.load --model F.gguf [--draft F.gguf] [--clients 4] [--requests 8] [--max-tokens 32]

Serves the model in this process (port 0, loopback), answers one request to warm up, notes the
process's memory (the idle level), then runs the clients: each sends its requests one after the
other, streamed, as an editor or an agent would. It prints a table and JSON: requests completed
and failed, the queue wait (P50/P99, as the server measured it), tokens/s over the run, and the
memory after the run against the idle level. A measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from engine import Engine, ModelSpec
from engine.serving.config import ServerConfig
from engine.serving.server import HeadlessServer, serve_engine

PROMPTS = [
    "Write a Python function that reverses a string.",
    "Explain what a hash table is in two sentences.",
    "List five fruits, one per line.",
    "Rewrite this sentence in the passive voice: The cat chased the mouse.",
    "What is 17 times 23? Show the steps.",
    "Give three tips for writing clear commit messages.",
]
SETTLE_S = 2.0  # after the run, how long memory is watched for it to come back down
BACK_TO_IDLE_MIB = 16.0  # "back to idle" allows this much above the idle level (allocator slack, the log)


@dataclass
class Outcome:
    ok: bool
    tokens: int = 0
    queue_ms: float = 0.0
    ttft_s: float = 0.0
    total_s: float = 0.0
    error: str = ""


@dataclass
class Report:
    clients: int
    requests_per_client: int
    max_tokens: int
    completed: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    queue_wait_ms_p50: float = 0.0
    queue_wait_ms_p99: float = 0.0
    ttft_s_p50: float = 0.0
    tokens: int = 0
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    rss_idle_mib: float | None = None
    rss_peak_mib: float | None = None
    rss_after_mib: float | None = None
    memory_back_to_idle: bool | None = None


def rss_mib() -> float | None:
    """This process's resident memory now (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return None


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def stream_one(port: int, api_key: str | None, model: str, prompt: str, max_tokens: int) -> Outcome:
    """One streamed chat request over its own connection; the figures come from the last chunks."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = conn.getresponse()
        if response.status != 200:
            return Outcome(False, error=f"HTTP {response.status}: {response.read()[:200]!r}")
        outcome, ttft = Outcome(False, error="the stream ended without [DONE]"), 0.0
        while line := response.readline():
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                outcome.ok, outcome.error = True, ""
                break
            chunk = json.loads(data)
            if "error" in chunk:
                return Outcome(False, error=chunk["error"].get("message", "error"))
            if not ttft and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - t0
            if "timings" in chunk:
                outcome.queue_ms = chunk["timings"]["queue_ms"]
            if chunk.get("usage"):
                outcome.tokens = chunk["usage"]["completion_tokens"]
        outcome.ttft_s, outcome.total_s = ttft, time.perf_counter() - t0
        return outcome
    except (OSError, http.client.HTTPException, ValueError) as e:
        return Outcome(False, error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def run_load(server: HeadlessServer, clients: int, requests: int, max_tokens: int, api_key: str | None) -> Report:
    port = server.server.port
    report = Report(clients, requests, max_tokens)
    warm = stream_one(port, api_key, server.model_id, PROMPTS[0], max_tokens)
    if not warm.ok:
        raise RuntimeError(f"the warm-up request failed: {warm.error}")
    gc.collect()
    report.rss_idle_mib = rss_mib()

    peak = [report.rss_idle_mib or 0.0]
    running = threading.Event()
    running.set()

    def watch_memory() -> None:
        while running.is_set():
            peak[0] = max(peak[0], rss_mib() or 0.0)
            time.sleep(0.05)

    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        for r in range(requests):
            outcome = stream_one(port, api_key, server.model_id, PROMPTS[(index + r) % len(PROMPTS)], max_tokens)
            with lock:
                outcomes.append(outcome)

    watcher = threading.Thread(target=watch_memory, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.wall_s = time.perf_counter() - t0

    # Memory after: every request finished and released, watched for a moment as it settles.
    idle_by = time.monotonic() + 30
    while server.service.queue.running is not None and time.monotonic() < idle_by:
        time.sleep(0.05)
    gc.collect()
    deadline, after = time.monotonic() + SETTLE_S, []
    while time.monotonic() < deadline:
        after.append(rss_mib() or 0.0)
        time.sleep(0.1)
    running.clear()
    watcher.join()
    report.rss_peak_mib = peak[0] or None
    report.rss_after_mib = min(after) if after and report.rss_idle_mib is not None else None
    if report.rss_idle_mib is not None and report.rss_after_mib is not None:
        report.memory_back_to_idle = report.rss_after_mib <= report.rss_idle_mib + BACK_TO_IDLE_MIB

    done = [o for o in outcomes if o.ok]
    report.completed, report.failed = len(done), len(outcomes) - len(done)
    report.errors = sorted({o.error for o in outcomes if not o.ok})[:5]
    report.queue_wait_ms_p50 = percentile([o.queue_ms for o in done], 50)
    report.queue_wait_ms_p99 = percentile([o.queue_ms for o in done], 99)
    report.ttft_s_p50 = percentile([o.ttft_s for o in done], 50)
    report.tokens = sum(o.tokens for o in done)
    report.tokens_per_s = report.tokens / report.wall_s if report.wall_s > 0 else 0.0
    return report


def table(report: Report) -> str:
    def mib(x):
        return "n/a" if x is None else f"{x:,.1f} MiB"

    back = {True: "yes", False: "NO", None: "n/a"}[report.memory_back_to_idle]
    rows = [
        ("clients × requests × max tokens", f"{report.clients} × {report.requests_per_client} × {report.max_tokens}"),
        ("completed / failed", f"{report.completed} / {report.failed}"),
        ("queue wait P50 / P99", f"{report.queue_wait_ms_p50:,.0f} ms / {report.queue_wait_ms_p99:,.0f} ms"),
        ("time to first token P50", f"{report.ttft_s_p50:.2f} s (queue wait included)"),
        ("tokens / wall time", f"{report.tokens} / {report.wall_s:.1f} s = {report.tokens_per_s:.1f} tok/s"),
        (
            "memory idle / peak / after",
            f"{mib(report.rss_idle_mib)} / {mib(report.rss_peak_mib)} / {mib(report.rss_after_mib)}",
        ),
        (f"memory back to idle (within {BACK_TO_IDLE_MIB:.0f} MiB)", back),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows + [("errors", e) for e in report.errors])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.serving.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="target GGUF")
    parser.add_argument("--draft", help="draft GGUF (default: none)")
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=8, help="requests per client, one after the other")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", metavar="FILE", help="also write the report here")
    args = parser.parse_args(argv)

    spec = ModelSpec(args.model, n_ctx=args.ctx, n_threads=args.threads)
    engine = Engine(spec, ModelSpec(args.draft, n_ctx=args.ctx, n_threads=args.threads) if args.draft else None)
    # Every client may wait at once: the run measures queueing, it does not test the limit.
    server = serve_engine(engine, ServerConfig(port=0, queue_limit=max(args.clients, 1)))
    try:
        report = run_load(server, args.clients, args.requests, args.max_tokens, None)
    finally:
        server.close()
        engine.close()
    print(table(report))
    text = json.dumps(asdict(report), indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
