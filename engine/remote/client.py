"""A remote OpenAI-compatible server (another Specula, llama-server, vLLM, SGLang, llama-cpp-python's
server): its models, and chat answers streamed from it.

Plain httpx2 (the HTTP client huggingface-hub already brings) and its server-sent events, not the
openai package: Stop must reach the connection before the response headers, which llama-server
holds back until its first token, and only a per-request `trace` extension hands the socket over
that early (openai's create() takes no request extensions); and the openai client fills in
credentials from OPENAI_API_KEY / OPENAI_ORG_ID / OPENAI_PROJECT_ID unless each is overridden,
which must never reach a server the user did not give them to. Here only the key the user gave is
sent, as `Authorization: Bearer`, and only when there is one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx2

from engine.config import ChatMessage, SamplingParams
from engine.remote import faults
from engine.remote.errors import (
    EndpointNotFoundError,
    MalformedResponseError,
    RemoteError,
    RequestRefusedError,
    ServerFailedError,
    UnknownModelError,
)
from engine.remote.hangup import Hangup
from engine.remote.models import RemoteModel, parse_model_list
from engine.remote.stream import ChatStream

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # silence allowed between bytes: a long prompt on a busy server sends nothing for a while
MAX_RETRIES = 3  # 429s retried before the error
MAX_RETRY_WAIT_S = 60.0  # a longer Retry-After is reported, not waited for
FIRST_RETRY_WAIT_S = 1.0  # a 429 without Retry-After waits 1, 2, 4 s
ERROR_BODY_LIMIT = 64 * 1024  # bytes of an error response read for its message
MODELS_NAMED = 8  # models listed by name in an unknown-model message


class RemoteServer:
    """One server at a base URL, with its API key or none. Streams may run on several threads at once.

    The key is sent in the Authorization header and nowhere else: not in repr(), errors or logs.
    Connections are not kept alive between requests, so each can be shut by its own Stop.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_retries: int = MAX_RETRIES,
        max_retry_wait_s: float = MAX_RETRY_WAIT_S,
    ):
        self.base_url, self.where = normalized_url(base_url)
        self._key = (api_key or "").strip() or None
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.max_retries, self.max_retry_wait_s = max_retries, max_retry_wait_s
        self._http = httpx2.Client(
            timeout=httpx2.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx2.Limits(max_keepalive_connections=0),
        )

    def __repr__(self) -> str:
        return f"RemoteServer({self.base_url!r}, api_key={'set' if self._key else 'none'})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteServer:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def scrub(self, text: str) -> str:
        """text with the API key blanked out, should a server echo it in a message."""
        return text.replace(self._key, "•••") if self._key else text

    # -- what a caller asks --------------------------------------------------------------------

    def models(self) -> list[RemoteModel]:
        """GET /models. Raises a RemoteError kind (unreachable, key refused, no API at the URL…)."""
        opened = self.open("GET", "/models", None, Hangup())
        assert opened is not None  # nothing can stop this Hangup
        response, _ = opened
        try:
            body = json.loads(response.read())
        except ValueError:
            raise MalformedResponseError(f"{self.where} answered /models with something other than JSON.") from None
        except httpx2.TimeoutException:
            raise faults.timed_out(self.where, self.read_timeout_s) from None
        except httpx2.TransportError as e:
            raise ServerFailedError(f"{self.where} broke off its list of models ({e}).") from e
        finally:
            response.close()
        models = parse_model_list(body)
        if models is None:
            raise MalformedResponseError(f"{self.where} answered /models with something other than a model list.")
        return models

    def chat(
        self,
        model: str,
        messages: Iterable[ChatMessage | Mapping[str, Any]],
        sampling: SamplingParams | None = None,
        *,
        extra_body: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> ChatStream:
        """A streamed answer (nothing is sent until it is iterated). sampling None: the server's
        defaults; extra_body: more request fields for a particular server (chat_template_kwargs…).
        Setting cancel, or ChatStream.close(), stops it (see ChatStream)."""
        return ChatStream(self, chat_body(model, messages, sampling, extra_body), cancel)

    # -- one request ---------------------------------------------------------------------------

    def open(self, method: str, path: str, body: dict | None, hangup: Hangup) -> tuple[httpx2.Response, float] | None:
        """Send a request; (the open 200 response, time.perf_counter() when it was sent), after
        waiting out 429s (Retry-After, else 1, 2, 4 s; a wait hangup can cut short). None when
        stopped first. Any other outcome raises its RemoteError kind."""
        for attempt in range(self.max_retries + 1):
            if hangup.stopped.is_set():
                return None
            request = self._http.build_request(
                method, self.base_url + path, json=body, headers=self._headers(), extensions={"trace": hangup.trace}
            )
            sent_at = time.perf_counter()
            try:
                response = self._http.send(request, stream=True)
            except httpx2.TransportError as e:
                if hangup.stopped.is_set():
                    return None
                raise self._transport_error(e) from e
            if response.status_code == 200:
                return response, sent_at
            message = self.scrub(faults.server_message(_error_body(response)))
            if response.status_code == 429:
                wait = faults.retry_after_s(response.headers.get("retry-after"))
                wait = FIRST_RETRY_WAIT_S * 2**attempt if wait is None else wait
                if attempt == self.max_retries or wait > self.max_retry_wait_s:
                    raise faults.rate_limited(self.where, attempt, wait, self.max_retry_wait_s, message)
                if hangup.wait(wait):
                    return None
                continue
            if response.status_code == 404:
                raise self._not_found((body or {}).get("model"), message)
            raise faults.status_error(response.status_code, message, self.where, self._key is not None)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def _transport_error(self, error: httpx2.TransportError) -> RemoteError:
        if isinstance(error, (httpx2.ConnectError, httpx2.ConnectTimeout)):
            return faults.unreachable(self.where, error, self.connect_timeout_s)
        if isinstance(error, httpx2.TimeoutException):
            return faults.timed_out(self.where, self.read_timeout_s)
        return ServerFailedError(f"{self.where} closed the connection without an answer ({error}).")

    def _not_found(self, model: str | None, message: str) -> RemoteError:
        """A 404: no API at the URL, or (the model list says) no such model."""
        if model is None:
            return EndpointNotFoundError(f"{self.where} has no OpenAI-compatible API at {self.base_url} (HTTP 404).")
        try:
            names = [m.id for m in self.models()]
        except EndpointNotFoundError as e:
            return e
        except RemoteError:
            names = None
        if names is not None and model not in names:
            listed = ", ".join(names[:MODELS_NAMED]) + (", …" if len(names) > MODELS_NAMED else "")
            has = f"it has {listed}" if names else "it lists no models"
            return UnknownModelError(f"{self.where} has no model {model!r}; {has}.", model, tuple(names))
        said = f": {message}" if message else "."
        return RequestRefusedError(f"{self.where} answered 404 (not found) for {model!r}{said}")


def list_models(base_url: str, api_key: str | None = None, **options) -> list[RemoteModel]:
    """The models of the server at base_url (RemoteServer's options by keyword)."""
    with RemoteServer(base_url, api_key, **options) as server:
        return server.models()


def chat_body(
    model: str,
    messages: Iterable[ChatMessage | Mapping[str, Any]],
    sampling: SamplingParams | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON of a streamed chat request, asking for usage on the last chunk. Each message is
    sent as role and content (an assistant's earlier thinking stays here)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": m.role, "content": m.content} if isinstance(m, ChatMessage) else dict(m) for m in messages
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if sampling is not None:
        body |= {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            # llama-server's names, which vLLM, SGLang, llama-cpp-python and Specula take too
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
    return body | dict(extra_body or {})


def normalized_url(base_url: str) -> tuple[str, str]:
    """(the base URL requests go under, the address to name in messages: scheme://host[:port]).
    A URL with no path gets /v1, where every server this speaks to has its API."""
    url = base_url.strip().rstrip("/")
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise RemoteError(
            f"{base_url!r} is not a server address.",
            hint="Write it as http://host:port/v1, e.g. http://192.168.1.20:8080/v1.",
        )
    if parsed.path in ("", "/"):
        url += "/v1"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port else ""
    return url, f"{parsed.scheme}://{host}{port}"


def _error_body(response: httpx2.Response) -> bytes:
    """Up to ERROR_BODY_LIMIT bytes of an error response, which is then closed."""
    body = b""
    try:
        for piece in response.iter_bytes():
            body += piece
            if len(body) >= ERROR_BODY_LIMIT:
                break
    except httpx2.TransportError:
        pass  # the status says enough
    finally:
        response.close()
    return body[:ERROR_BODY_LIMIT]
