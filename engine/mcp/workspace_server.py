"""A real MCP server over one folder, written with the SDK: what Specula's tests and its agent benchmark
call, and a server a user can try (`python -m engine.mcp.workspace_server ROOT`, over stdio; add
`--http PORT` for streamable HTTP on 127.0.0.1, 0 for a free port, and `--sse` for the older SSE transport;
the address is printed once it listens).

Tools: read_file, list_files, search, edit_file, run_check. Every path is relative to ROOT and must stay
inside it: `..`, absolute paths and symlinks that lead out are refused. run_check runs one fixed check
(Python's own compile step on a .py file), never a command the caller chooses.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

MAX_READ_CHARS = 200_000  # a model's context is the limit that matters; a huge file is cut, and says so
MAX_LIST = 1000
MAX_MATCHES = 200
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
CHECK_TIMEOUT_S = 60


class Workspace:
    """The folder the tools may touch; resolve() is the only way a caller's path becomes a real one."""

    def __init__(self, root: Path):
        self.root = root.resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"{root} is not a folder")

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        if not path or path.strip() in (".", ""):
            return self.root
        given = Path(path)
        if given.is_absolute() or ".." in given.parts:
            raise ToolError(f"{path!r}: paths are relative to the workspace and may not contain '..'")
        # resolve() follows every symlink, so a link pointing out of the folder lands outside and is refused.
        real = (self.root / given).resolve()
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{path!r} leads outside the workspace")
        if must_exist and not real.exists():
            raise ToolError(f"{path!r} does not exist{self._nearest(path)}")
        return real

    def _nearest(self, path: str) -> str:
        """'; did you mean …?' with the workspace's paths nearest a missing one (a file of that name elsewhere,
        or a close spelling), or nothing: a small model that guessed a path repeats the guess without it."""
        files = [self.relative(f) for f in itertools.islice(self.files(self.root), MAX_LIST)]
        known = sorted({*files, *(p for f in files for p in map(str, Path(f).parents) if p != ".")})
        name = Path(path).name
        near = [k for k in known if Path(k).name == name] or difflib.get_close_matches(path, known, n=3)
        return f"; did you mean {' or '.join(repr(k) for k in near[:3])}?" if near else ""

    def relative(self, real: Path) -> str:
        return real.relative_to(self.root).as_posix() or "."

    def files(self, under: Path):
        """Regular files below under, sorted, skipping tool caches and links that lead out."""
        for dirpath, dirnames, filenames in os.walk(under):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                candidate = Path(dirpath) / name
                real = candidate.resolve()
                if self.root in real.parents and real.is_file():
                    yield candidate


def build_server(root: Path) -> MCPServer:
    workspace = Workspace(root)
    server = MCPServer(
        "specula-workspace", instructions=f"Files in the folder {workspace.root.name}", log_level="WARNING"
    )

    @server.tool()
    def read_file(path: str) -> str:
        """Read a text file of the workspace. path: relative to the workspace root."""
        real = workspace.resolve(path)
        if not real.is_file():
            raise ToolError(f"{path!r} is not a file")
        text = real.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_READ_CHARS:
            return text[:MAX_READ_CHARS] + f"\n[cut: the file has {len(text)} characters]"
        return text

    @server.tool()
    def list_files(path: str = ".") -> str:
        """List the files under a folder of the workspace (recursively), one relative path a line."""
        real = workspace.resolve(path)
        if not real.is_dir():
            raise ToolError(f"{path!r} is not a folder")
        names = []
        for file in workspace.files(real):
            if len(names) == MAX_LIST:
                names.append(f"[more files not listed: the first {MAX_LIST} are shown]")
                break
            names.append(workspace.relative(file))
        return "\n".join(names) if names else "(no files)"

    @server.tool()
    def search(pattern: str, path: str = ".") -> str:
        """Search the workspace's text files for a regular expression (Python syntax), like grep -rn: one 'file:line: text' a match."""
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise ToolError(f"not a regular expression: {e}") from e
        real = workspace.resolve(path)
        candidates = [real] if real.is_file() else workspace.files(real)
        matches = []
        for file in candidates:
            try:
                lines = file.read_text(encoding="utf-8").splitlines()
            except (UnicodeDecodeError, OSError):
                continue  # binary or unreadable: grep -I skips them too
            for number, line in enumerate(lines, 1):
                if regex.search(line):
                    matches.append(f"{workspace.relative(file)}:{number}: {line}")
                    if len(matches) == MAX_MATCHES:
                        return "\n".join([*matches, f"[stopped at {MAX_MATCHES} matches]"])
        return "\n".join(matches) if matches else "(no matches)"

    @server.tool()
    def edit_file(path: str, old_text: str, new_text: str) -> str:
        """Replace old_text, which must occur exactly once in the file, by new_text; an empty old_text creates the file with new_text."""
        real = workspace.resolve(path, must_exist=False)
        if not old_text:
            if real.exists():
                raise ToolError(f"{path!r} exists: give the text to replace")
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_text(new_text, encoding="utf-8")
            return f"created {workspace.relative(real)} ({len(new_text)} characters)"
        if not real.is_file():
            raise ToolError(f"{path!r} is not a file")
        text = real.read_text(encoding="utf-8")
        count = text.count(old_text)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ToolError(f"the text to replace {where} in {path!r}; it must occur exactly once")
        real.write_text(text.replace(old_text, new_text), encoding="utf-8")
        return f"edited {workspace.relative(real)}"

    @server.tool()
    def run_check(path: str) -> str:
        """Check that a Python file compiles (Python's own compile step, as python -m py_compile does): 'ok' or the error."""
        real = workspace.resolve(path)
        if real.suffix != ".py" or not real.is_file():
            raise ToolError(f"{path!r} is not a Python file")
        # Compiled in a child with bytecode writing off: the check leaves no __pycache__ in the workspace.
        done = subprocess.run(
            [
                sys.executable,
                "-B",
                "-c",
                "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')",
                real,
            ],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            cwd=workspace.root,
        )
        if done.returncode == 0:
            return f"ok: {workspace.relative(real)} compiles"
        error = done.stderr.strip().splitlines()
        return "\n".join(["failed:", *error[-6:]]).replace(str(workspace.root) + os.sep, "")

    return server


def serve_http(server: MCPServer, port: int, sse: bool = False) -> None:
    """Streamable HTTP on 127.0.0.1:port (0: a free one), printing the address once it listens;
    sse: the older SSE transport instead (at /sse)."""
    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    app = server.sse_app() if sse else server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    path = "/sse" if sse else "/mcp"
    print(f"serving the workspace at http://127.0.0.1:{sock.getsockname()[1]}{path}", flush=True)
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.mcp.workspace_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the folder the tools may read and edit")
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT (0: any free port)"
    )
    parser.add_argument("--sse", action="store_true", help="with --http: the older SSE transport, at /sse")
    args = parser.parse_args(argv)
    try:
        server = build_server(args.root)
    except OSError as e:
        parser.error(f"{args.root}: {e.strerror or e}")
    if args.http is None:
        server.run("stdio")
    else:
        serve_http(server, args.http, sse=args.sse)
    return 0


if __name__ == "__main__":
    sys.exit(main())
