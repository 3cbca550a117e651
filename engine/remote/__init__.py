"""Remote engines: chat with a model served by another computer over OpenAI's chat completions API.

Qt-free, like the rest of the engine. The public shape:

- `RemoteServer(base_url, api_key)`: `.models()` -> [`RemoteModel`]; `.chat(model, messages, sampling,
  cancel=Event)` -> `ChatStream`, which yields `TextDelta` and `ReasoningDelta`, then one `RemoteDone`
  (text, reasoning, finish_reason, usage, `RemoteFigures`); `ChatStream.close()` or the Event stops it.
  `list_models(base_url, api_key)` for a one-off look.
- `RemoteFigures`: the server's own speculation figures labelled by `FigureSource` (Specula,
  llama-server, vLLM, SGLang), or `CLIENT` with a note when it gave none; the client's time to first
  token and tokens/s always.
- Failures: the `RemoteError` kinds in `engine.remote.errors`; `engine.errors.user_message(error)`
  says what happened and what to do, and an error mid-answer carries the text so far.
"""

from engine.remote.client import RemoteServer, chat_body, list_models
from engine.remote.errors import (
    ApiKeyRefusedError,
    EndpointNotFoundError,
    MalformedResponseError,
    RateLimitedError,
    RemoteError,
    RequestRefusedError,
    ServerFailedError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamCutError,
    UnknownModelError,
)
from engine.remote.figures import FigureSource, RemoteFigures, read_figures
from engine.remote.models import RemoteModel
from engine.remote.records import CANCELLED, ReasoningDelta, RemoteDone, RemoteEvent, RemoteUsage, TextDelta
from engine.remote.stream import ChatStream

__all__ = [
    "CANCELLED",
    "ApiKeyRefusedError",
    "ChatStream",
    "EndpointNotFoundError",
    "FigureSource",
    "MalformedResponseError",
    "RateLimitedError",
    "ReasoningDelta",
    "RemoteDone",
    "RemoteError",
    "RemoteEvent",
    "RemoteFigures",
    "RemoteModel",
    "RemoteServer",
    "RemoteUsage",
    "RequestRefusedError",
    "ServerFailedError",
    "ServerTimeoutError",
    "ServerUnreachableError",
    "StreamCutError",
    "TextDelta",
    "UnknownModelError",
    "chat_body",
    "list_models",
    "read_figures",
]
