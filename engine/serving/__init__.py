"""A local OpenAI-compatible server over the same speculative engine (`python -m engine serve`).

- config: what the server may do (where it listens, the key, the Host names it answers, the caps),
  private by default;
- fair_queue: one engine, many clients: first come, first served, with a limit;
- generation: a request run on the engine's thread, its events bridged to the async side;
- openai_api: OpenAI's request and response shapes, and the speculation figures per answer;
- documents: a chat answered from the user's document collections (`"specula": {"collections": [...]}`),
  its sources in the response;
- served_model: the loaded model as served: its names, its /v1/models card, its answers' defaults;
- app: the ASGI application (Starlette; sse-starlette streams server-sent events), closed to web
  pages (Host, Origin, Content-Type);
- server: the one assembly (LocalServer), uvicorn on a socket bound here, in a thread, started and
  stopped by its owner (`python -m engine serve`, the app's Local server);
- load: a bounded load script (N streaming clients, queue waits, tokens/s, memory back to idle).

Uses the engine's public API only; never makes an outgoing connection.
"""
