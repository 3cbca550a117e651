"""Tools in the terminal chat: `python -m engine chat --tools NAME` offers the tools of the user's MCP servers
(mcp.json, the servers the app lists under Tools), and asks at the prompt before every call.

The terminal keeps the app's rules: a call runs only once the user says yes (or "always" for that tool in this
chat, until /new); a "no" ends the answer there, as does Ctrl+C at the question or during the call, or a call that takes
longer than TOOL_TIMEOUT_S; what a server says when it fails is shown as it said it. Secrets the app moved to the keyring
("${keyring:ID}" in mcp.json) are read from the same keyring.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.errors import EngineError, user_message
from engine.paths import APP_NAME
from engine.tools import ToolCall, ToolSpec

TOOL_TIMEOUT_S = 60.0  # one call, as in the app
MAX_STEPS = 8  # passes of the model that may call tools in one answer, as in the app
QUIT_COMMANDS = ("/quit", "/exit")  # leave the terminal chat, at its prompt or at a tool's question
RESULT_LINES = 6  # of a result, the lines shown in the terminal (the model reads it whole)
# Control characters but tab and newline: a server's words reach the terminal, and escape sequences in them could
# retitle it, clear it or hide text; they are shown as \x1b and so on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class CallOutcome:
    """A call's result for the model, or why the answer ends here (stop: the user said no, or it failed)."""

    text: str
    stop: str = ""


class LeaveChat(Exception):
    """The user typed /quit (or /exit) at a tool's question: the chat ends there, as it would at the prompt."""


class TerminalTools:
    """The servers named, started on one McpHost: their tools, and calls asked of the user first.

    ask(question) -> the user's line (input() by default; EOFError counts as no, /quit raises LeaveChat)."""

    def __init__(self, names: Sequence[str], ask: Callable[[str], str] = input):
        from engine.mcp import load_config

        config = load_config()
        unknown = [name for name in names if name not in config.servers]
        if unknown:
            problems = [f"{name}: {config.problems[name]}" for name in unknown if name in config.problems]
            known = ", ".join(config.servers) or "none yet (add them in the app: Tools → Manage MCP servers)"
            raise EngineError(
                f"No usable MCP server named {', '.join(unknown)} in your mcp.json.",
                hint="\n".join(problems) or f"Your servers: {known}.",
            )
        self._servers = [config.servers[name] for name in dict.fromkeys(names)]
        self._ask = ask
        self._host = None
        self._server_of: dict[str, str] = {}  # tool name -> its server (the first server that offers it)
        self.specs: list[ToolSpec] = []
        self.always: set[str] = set()  # tools the user allowed for this chat (/new clears it)

    def start(self, say: Callable[[str], None]) -> None:
        """Start the servers and list their tools; EngineError says which one failed and why."""
        from engine.mcp import McpError, McpHost

        self._host = McpHost()
        for server in self._servers:
            try:
                infos = self._host.start(server, _secrets(server))
            except McpError as e:
                self.close()
                raise EngineError(f"The MCP server {server.name} did not start.", hint=shown(str(e))) from None
            offered = [info for info in infos if info.name not in self._server_of]
            for info in offered:
                self._server_of[info.name] = server.name
                self.specs.append(ToolSpec.from_openai(info.as_openai()))
            names = ", ".join(info.name for info in offered) or "no tools"
            say(shown(f"{server.name}: {names}"))

    def run(self, call: ToolCall) -> CallOutcome:
        """Ask, then run one call of the model's (Ctrl+C while it runs stops it)."""
        from engine.mcp import McpError, McpToolError

        server = self._server_of.get(call.name, "")
        if not server:
            return CallOutcome(f"Error: there is no tool named {call.name!r}.")
        if call.name not in self.always:
            # The call was just shown (call_line): the question names only where it runs and what "always" covers.
            answer = self._question(f"Run it on {server}? [y]es, [a]lways for {call.name}, [n]o: ")
            if answer == "a":
                self.always.add(call.name)
            elif answer == "":
                return CallOutcome("", stop=f"Stopped before {call.name} ran: the answer stops here.")
            elif answer != "y":
                return CallOutcome("", stop=f"You denied {call.name} on {server}: the answer stops here.")
        running = self._host.call_async(server, call.name, call.arguments, timeout=TOOL_TIMEOUT_S)
        try:
            return CallOutcome(running.result().text)
        except KeyboardInterrupt:
            running.cancel()
            return CallOutcome("", stop=f"{call.name} was stopped: the answer stops here.")
        except McpToolError as e:  # the tool said it failed: the model reads what it said, as in the app
            return CallOutcome(e.text)
        except McpError as e:  # timed out, or the server is gone
            return CallOutcome("", stop=f"{call.name} on {server} failed: {user_message(e)}")

    def _question(self, prompt: str) -> str:
        """y, a or n; "" when Ctrl+C stops the answer at the question (it stops an answer, not the chat)."""
        while True:
            try:
                line = self._ask(prompt).strip().lower()
            except EOFError:
                return "n"
            except KeyboardInterrupt:
                print()  # the question's line ends
                return ""
            if line in QUIT_COMMANDS:
                raise LeaveChat
            if line[:1] in ("y", "a", "n"):
                return line[:1]

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None


def call_line(call: ToolCall) -> str:
    """How a call is shown: name(arguments as JSON)."""
    return shown(f"→ {call.name}({json.dumps(call.arguments, ensure_ascii=False)})")


def result_lines(text: str) -> str:
    """The start of a result, as the terminal shows it (the model reads all of it)."""
    lines = text.splitlines() or [""]
    first = [shown(line[:120]) for line in lines[:RESULT_LINES]]
    if len(lines) > RESULT_LINES:
        first.append(f"… {len(lines) - RESULT_LINES:,} more lines")
    return "\n".join("  " + line for line in first)


def shown(text: str) -> str:
    """text as the terminal may print it: control characters (escape sequences) visible, not obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _secrets(server) -> dict[str, str]:
    """The values of the server's "${keyring:ID}" references, from the keyring the app stores them in
    (what cannot be read is left out: the host then names what is missing)."""
    ids = server.secret_ids()
    if not ids:
        return {}
    try:
        import keyring

        found = {sid: keyring.get_password(APP_NAME, sid) for sid in ids}
    except Exception as e:  # noqa: BLE001 - no keyring, a locked one: the host says what is missing
        print(f"The keyring could not be read ({e}).", file=sys.stderr)
        return {}
    return {sid: value for sid, value in found.items() if value is not None}
