"""What can go wrong with a remote server, one kind per thing the user does about it.

Every kind names the server by its address (never the API key) and says what to do in its hint, so
engine.errors.user_message(error) is the text to show. A failure after the answer began carries
the text so far (partial_text, partial_reasoning): the caller keeps it, marked as cut off.
"""

from __future__ import annotations

from engine.errors import EngineError


class RemoteError(EngineError):
    """A remote server could not be reached, refused a request, or broke off an answer."""

    def __init__(self, message: str, hint: str = "", *, partial_text: str = "", partial_reasoning: str = ""):
        super().__init__(message, hint)
        self.partial_text = partial_text
        self.partial_reasoning = partial_reasoning


class ServerUnreachableError(RemoteError):
    """Nothing answered at the address: refused, unreachable, a name that does not resolve."""

    hint = (
        "Check that the server is running and the address and port are right; a server on another "
        "computer must listen beyond its own loopback (llama-server and Specula: --host)."
    )


class ServerTimeoutError(RemoteError):
    """The server took the request and then went silent for longer than the read timeout."""

    hint = "The server may be overloaded or stuck. Try again, or look at the server's own log."


class ApiKeyRefusedError(RemoteError):
    """401 or 403: the key is missing or wrong."""

    hint = "Check the API key set for this server."


class UnknownModelError(RemoteError):
    """404 for the model: the server does not serve it (any more)."""

    hint = "Pick one of the server's models; the list is refreshed from the server."

    def __init__(self, message: str, model: str, available: tuple[str, ...]):
        super().__init__(message)
        self.model, self.available = model, available


class EndpointNotFoundError(RemoteError):
    """404 for the API itself: the base URL does not lead to an OpenAI-compatible API."""

    hint = "The base URL usually ends in /v1, as in http://host:8080/v1."


class RateLimitedError(RemoteError):
    """429 after the retries allowed (or a wait longer than we are willing to make)."""

    hint = "The server is busy with other requests. Try again in a moment."


class RequestRefusedError(RemoteError):
    """Another 4xx: the server named something wrong with the request (too long a prompt…)."""

    hint = "The server's message above says what it refused."


class ServerFailedError(RemoteError):
    """A 5xx, or an error event in the middle of the stream."""

    hint = "The server failed on its side; its own log says more. Try again."


class StreamCutError(RemoteError):
    """The stream ended before the answer did: the connection dropped or the server stopped sending."""

    hint = "The answer so far is kept, marked as cut off. Try again to get the rest."


class MalformedResponseError(RemoteError):
    """The server sent something that is not the OpenAI format: bad JSON, no choices, not a stream."""

    hint = "The server does not speak the OpenAI chat completions format as expected; check its version."
