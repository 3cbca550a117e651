"""HTTP failures in words: a status with the server's own message, a transport error with its reason.

Pure functions from what came back (status, body, headers, exception) to a RemoteError kind; the
client decides when a failure is final (429 is retried first, a 404 first checks the model list).
A server's message is shortened to one line of MESSAGE_LIMIT characters.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from email.utils import parsedate_to_datetime

from engine.remote.errors import (
    ApiKeyRefusedError,
    RateLimitedError,
    RemoteError,
    RequestRefusedError,
    ServerFailedError,
    ServerTimeoutError,
    ServerUnreachableError,
)

MESSAGE_LIMIT = 300  # characters of a server's message kept (an HTML error page is dropped)

_REFUSED = {errno.ECONNREFUSED}
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}


def server_message(body: bytes | str) -> str:
    """The error text in a body: OpenAI's {"error": {"message"}}, {"error": "…"}, FastAPI's
    {"detail"}, a bare {"message"}; plain text as it is; HTML or nothing: ""."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        found = error.get("message") if isinstance(error, dict) else error
        found = found or data.get("detail") or data.get("message")
        text = found if isinstance(found, str) else json.dumps(found) if found else ""
    elif text.lstrip().startswith("<"):
        text = ""
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def status_error(status: int, message: str, where: str, has_key: bool) -> RemoteError:
    """The error for an HTTP status other than 404 (which needs the model list) and 429 (retried)."""
    said = f": {message}" if message else "."
    if status in (401, 403):
        if not has_key:
            return ApiKeyRefusedError(f"{where} requires an API key (HTTP {status}){said}")
        return ApiKeyRefusedError(f"{where} refused the API key (HTTP {status}){said}")
    if status >= 500:
        return ServerFailedError(f"{where} failed to answer (HTTP {status}){said}")
    return RequestRefusedError(f"{where} refused the request (HTTP {status}){said}")


def rate_limited(where: str, retries: int, wait_s: float, limit_s: float, message: str) -> RateLimitedError:
    """429 for good: after the retries, or asked to wait longer than limit_s."""
    if wait_s > limit_s:
        why = f"is busy and asks to wait {wait_s:.0f} s before another request"
    else:
        why = f"was still busy after {retries} retries" if retries else "is busy"
    return RateLimitedError(f"{where} {why} (HTTP 429)" + (f": {message}" if message else "."))


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds from now: a number of seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def unreachable(where: str, error: BaseException, connect_timeout_s: float) -> ServerUnreachableError:
    """Connecting failed: refused, unreachable, unknown name, or no answer to the connection at all."""
    return ServerUnreachableError(f"Could not reach {where}: {_reason(error, connect_timeout_s)}.")


def timed_out(where: str, read_timeout_s: float, text: str = "", reasoning: str = "") -> ServerTimeoutError:
    """The read timeout passed with nothing received; text and reasoning: what came before it."""
    silent = "went silent in the middle of the answer" if text or reasoning else "sent nothing back"
    return ServerTimeoutError(
        f"{where} {silent} for {read_timeout_s:g} s.", partial_text=text, partial_reasoning=reasoning
    )


def _reason(error: BaseException, connect_timeout_s: float) -> str:
    cause = _os_error(error)
    if isinstance(cause, socket.gaierror):
        return "its name does not resolve to an address"
    if isinstance(cause, TimeoutError) or "timed out" in str(error).lower():
        return f"no answer to the connection within {connect_timeout_s:g} s (a firewall, or the wrong address)"
    if cause is not None and cause.errno in _REFUSED:
        return "connection refused (nothing listens on that port)"
    if cause is not None and cause.errno in _UNREACHABLE:
        return "host unreachable (no route to it on this network)"
    detail = str(cause or error).strip()
    return detail or type(error).__name__


def _os_error(error: BaseException | None) -> OSError | None:
    """The operating system's error under an HTTP library's wrapping, if any."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError):
            return error
        error = error.__cause__ or error.__context__
        seen += 1
    return None
