"""The ASGI application: OpenAI's endpoints over an EngineService (Starlette, sse-starlette).

Each request is checked in this order: its Host (403: not a name of this server, as after DNS
rebinding) and its Origin (403: a web page of another origin), both by WebGuard, for every path
and method; then the API key (401), the body's Content-Type (415: not application/json, as a
page's form or text/plain post, which a browser sends without asking), its size (413), its JSON
(400), its fields (400; an unknown model 404), the document collections it names (400), a place in
the queue (429). Then it streams server-sent events (chat.completion.chunk / text_completion, then
`data: [DONE]`) or waits for the whole answer. A client that goes away sets the ticket's cancel
event: the engine stops within one decode step (or skips the request if it still waits), and the
next request starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine import DoneEvent, FinishReason, MalformedToolCallEvent, TokenEvent, ToolCallEvent
from engine.serving.config import HostRule, ServerConfig
from engine.serving.documents import Grounding
from engine.serving.fair_queue import QueueFull, Ticket
from engine.serving.generation import EngineService, EventBridge, Failed, http_status
from engine.serving.openai_api import (
    ApiError,
    Defaults,
    Parsed,
    Shaper,
    missing_call,
    parse_chat,
    parse_completion,
)
from engine.serving.request_log import RequestLog, RequestRecord

PING_S = 15  # a comment line every 15 s keeps proxies from closing a stream that waits in the queue
DISCONNECT_POLL_S = 0.2  # how often a non-streamed request checks that its client is still there


def error_response(error: ApiError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class Api:
    """The endpoints. defaults and model_card may be replaced while serving (the app loads another model)."""

    def __init__(self, service: EngineService, config: ServerConfig, defaults: Defaults, model_card: dict | None):
        self.service, self.config, self.defaults, self.model_card = service, config, defaults, model_card
        # Compared as digests: equal lengths, so compare_digest's time says nothing about the key.
        self._key_digest = hashlib.sha256(config.api_key.encode()).digest() if config.api_key else None

    # -- endpoints -----------------------------------------------------------------------------

    async def health(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except ApiError as e:
            return error_response(e)
        return JSONResponse({"object": "list", "data": [self.model_card] if self.model_card else []})

    async def model(self, request: Request) -> Response:
        try:
            self._authorize(request)
            name = request.path_params["name"]
            if not self.model_card or name.lower() not in {n.lower() for n in self.defaults.model_names}:
                raise ApiError(404, f"The model {name!r} does not exist here.", "model", "model_not_found")
        except ApiError as e:
            return error_response(e)
        return JSONResponse(self.model_card)

    async def chat_completions(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    # -- the checks ----------------------------------------------------------------------------

    def _authorize(self, request: Request) -> None:
        if self._key_digest is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self._key_digest):
            raise ApiError(
                401, "Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.", code="invalid_api_key"
            )

    async def _read_json(self, request: Request):
        # Before a byte of the body is read: a web page may post text/plain or a form to any
        # address without the browser asking first (no CORS preflight), never application/json.
        sent = request.headers.get("content-type")
        if sent is None or sent.partition(";")[0].strip().lower() != "application/json":
            said = f"Content-Type {sent!r}" if sent is not None else "no Content-Type"
            raise ApiError(
                415,
                f"The request body must be sent as 'Content-Type: application/json'; this one came with {said}.",
                code="unsupported_media_type",
            )
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(int(declared))
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise self._too_large(len(body))
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"The request body is not valid JSON: {e}.", code="invalid_json") from None

    def _too_large(self, size: int) -> ApiError:
        return ApiError(
            413,
            f"The request body is {size:,} bytes or more; this server accepts at most {self.config.max_body_bytes:,}.",
            code="request_too_large",
        )

    def _check_collections(self, names: tuple[str, ...]) -> None:
        """Each collection a request names exists in the library (its collections.json only: a small file)."""
        if not names:
            return
        missing, known = self.service.documents.unknown(names)
        if missing:
            there = ", ".join(repr(n) for n in known) if known else "none (python -m engine docs add NAME FOLDER)"
            raise ApiError(
                400,
                f"There is no document collection named {missing[0]!r} on this server; its collections: {there}.",
                "specula.collections",
                "collection_not_found",
            )

    # -- answering -----------------------------------------------------------------------------

    async def _answer(self, request: Request, chat: bool) -> Response:
        client = f"{request.client.host}:{request.client.port}" if request.client else ""
        record = self.service.log.begin(request.method, request.url.path, client)
        try:
            self._authorize(request)
            body = await self._read_json(request)
            parsed = (parse_chat if chat else parse_completion)(body, self.defaults)
            self._check_collections(parsed.generation.collections)
            record.stream = parsed.stream
            ticket, bridge = self.service.start(parsed.generation, record, asyncio.get_running_loop())
        except ApiError as e:
            self.service.log.finish(record, "rejected", e.status, e.message)
            return error_response(e)
        except QueueFull as e:
            error = ApiError(429, str(e), code="queue_full")
            self.service.log.finish(record, "rejected", 429, error.message)
            return error_response(error, headers={"Retry-After": "1"})
        # parse_* refused the request when no model is loaded
        shaper = Shaper(chat, self.defaults.model_names[0], parsed.generation.parallel_tool_calls)
        if parsed.stream:
            record.status = 200
            return EventSourceResponse(self._stream(shaper, parsed, ticket, bridge, record), ping=PING_S)
        return await self._whole(request, shaper, parsed, ticket, bridge, record)

    async def _stream(self, shaper: Shaper, parsed: Parsed, ticket: Ticket, bridge: EventBridge, record: RequestRecord):
        ended, grounding = False, None
        try:
            first = shaper.first_chunk()
            if first:
                yield _event(first)
            async for item in bridge:
                if isinstance(item, Grounding):
                    grounding = item  # its sources go in the last chunk, marked where the answer cites them
                elif isinstance(item, TokenEvent):
                    if item.text and not item.tool_call:  # a call's markup goes out as delta.tool_calls
                        yield _event(shaper.token_chunk(item.text, item.reasoning))
                elif isinstance(item, ToolCallEvent):
                    for chunk in shaper.tool_call_chunks(item.call):
                        yield _event(chunk)
                elif isinstance(item, MalformedToolCallEvent):  # what the model wrote stays visible
                    yield _event(shaper.token_chunk(item.malformed.raw, False))
                elif isinstance(item, DoneEvent):
                    error = _done_error(item) if http_status(item) != 200 else missing_call(item, parsed.generation)
                    if error is not None:
                        yield _event(error.body())
                        continue
                    yield _event(shaper.last_chunk(item, parsed.generation.spec, ticket.queue_wait_s, grounding))
                    if parsed.include_usage:
                        yield _event(shaper.usage_chunk(item))
                elif isinstance(item, Failed):
                    yield _event(ApiError(item.status, item.message).body())
            ended = True
            yield ServerSentEvent(data="[DONE]")
        finally:
            if not ended:  # the client went away (sse-starlette cancels this generator) or the server stops
                record.client_gone = True
                ticket.cancel.set()

    async def _whole(
        self, request: Request, shaper: Shaper, parsed: Parsed, ticket: Ticket, bridge: EventBridge, record
    ) -> Response:
        async def watch_client() -> None:
            while not await request.is_disconnected():
                await asyncio.sleep(DISCONNECT_POLL_S)
            record.client_gone = True
            ticket.cancel.set()

        watcher = asyncio.create_task(watch_client())
        done, failed, grounding = None, None, None
        try:
            async for item in bridge:
                if isinstance(item, Grounding):
                    grounding = item
                elif isinstance(item, DoneEvent):
                    done = item
                elif isinstance(item, Failed):
                    failed = item
        finally:
            watcher.cancel()
            if done is None and failed is None:
                ticket.cancel.set()  # this handler itself was cancelled (the server stopping)
        if failed is not None:
            return error_response(ApiError(failed.status, failed.message))
        if done is None:
            return error_response(ApiError(503, "The request was cancelled before it ran.", code="cancelled"))
        if http_status(done) != 200:
            return error_response(_done_error(done))
        if (error := missing_call(done, parsed.generation)) is not None:
            return error_response(error)
        return JSONResponse(shaper.whole(done, parsed.generation.spec, ticket.queue_wait_s, grounding))


def _event(payload: dict) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(payload, ensure_ascii=False))


def _done_error(done: DoneEvent) -> ApiError:
    if done.finish_reason == FinishReason.CONTEXT:
        return ApiError(
            400, done.error or "The prompt does not fit in the context.", "messages", "context_length_exceeded"
        )
    return ApiError(http_status(done), done.error or "The engine failed to answer.")


class WebGuard:
    """Refuses, before anything else runs, what only a web page would send: a Host that is not a
    name of this server (DNS rebinding: the attacker's name, resolved to this computer, would let
    its page read the answers) and an Origin that is neither the server's own nor a CORS one.

    Our own ASGI middleware rather than Starlette's TrustedHostMiddleware: that one answers 400 in
    plain text, where every other refusal here is OpenAI's JSON error (a client shows its message),
    and it has no place for the Origin check or the request log. Refusals are logged as "rejected",
    so the terminal and the app's log say which page or proxy was turned away and why.
    """

    def __init__(self, app: ASGIApp, hosts: HostRule, cors_origins: tuple[str, ...], log: RequestLog):
        self.app, self.hosts, self.cors_origins, self.log = app, hosts, cors_origins, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.refusal(Headers(scope=scope))
        if error is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        record = self.log.begin(scope["method"], scope["path"], f"{client[0]}:{client[1]}" if client else "")
        self.log.finish(record, "rejected", error.status, error.message)
        await error_response(error)(scope, receive, send)

    def refusal(self, headers: Headers) -> ApiError | None:
        host = headers.get("host", "")
        if not self.hosts.allows(host):
            said = f"the Host {host!r}" if host else "no Host header"
            return ApiError(
                403,
                # Not the names it answers: a page that rebound its own name to this computer reads this.
                f"Refused: the request came with {said}, which is not a name of this server: localhost, "
                "the address it listens on, or a name allowed with --allow-host NAME (a reverse proxy's).",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin, host):
            return ApiError(
                403,
                f"Refused: a web page of {origin} may not use this server. To let one, start it with "
                f"--cors-origin {origin}.",
                code="origin_not_allowed",
            )
        return None

    def origin_allowed(self, origin: str, host: str) -> bool:
        """A CORS origin (compared as CORSMiddleware compares it: exactly, "*" any), or the page's
        own: the Origin names the Host the request went to (already allowed), as a same-origin one."""
        if origin in self.cors_origins or "*" in self.cors_origins:
            return True
        return origin.lower() in (f"http://{host.lower()}", f"https://{host.lower()}")


async def _http_error(_request: Request, exc: HTTPException) -> Response:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return error_response(ApiError(exc.status_code, str(exc.detail), code=code))


def build_app(api: Api) -> Starlette:
    """The application. CORS headers are sent only for the origins config names (none by default);
    WebGuard, outermost, refuses other origins and other Hosts first (a preflight included)."""
    config = api.config
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/models/{name:path}", api.model, methods=["GET"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
    ]
    middleware = [Middleware(WebGuard, hosts=config.host_rule(), cors_origins=config.cors_origins, log=api.service.log)]
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_error})
