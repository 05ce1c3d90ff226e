"""A local aiohttp server that replays recorded vLLM SSE streams (no engine),
and misbehaves on request: an HTTP status, a plain JSON reply, a stream cut
off early, a server that never answers, or one that wants an API key; and
one that ignores max_tokens (``EndlessVllm``). ``threaded`` serves fakes
from a background thread, for a command run in the foreground or a subprocess;
``stub_config`` is the small replay run the tests point at them."""

from __future__ import annotations

import asyncio
import threading
from contextlib import asynccontextmanager, contextmanager

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.replay.config import ReplayConfig

GOOD_SSE = (
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


def stub_config(tmp_path, fixtures, **kw) -> ReplayConfig:
    """A replay of ``fixtures/traffic_small.jsonl`` at levels 1 and 2, one repeat, no lossless
    pass, short timeouts, no progress, into ``tmp_path/runs/x``; ``kw`` overrides any field."""
    base = dict(
        traffic=fixtures / "traffic_small.jsonl",
        runs_dir=tmp_path / "runs",
        run_id="x",
        levels=[1, 2],
        warmup_requests=1,
        progress=False,
        capture_wait_s=0.0,
        connect_timeout_s=2.0,
        request_timeout_s=2.0,
        repeats=1,
        lossless_pass=False,
    )
    base.update(kw)
    return ReplayConfig(**base)


#: The streaming transport ``serving`` hands out: "aiohttp" (a ClientSession) or
#: "pool" (specdec's own ``http.stream.StreamPool``); the client tests run under both.
TRANSPORT = {"name": "aiohttp"}


@asynccontextmanager
async def serving(server: TestServer, transport: str | None = None):
    """Start `server`; yield (client, base URL); close both. The client is an
    aiohttp session or a StreamPool (``transport``, default ``TRANSPORT``)."""
    from specdec.replay.http.stream import StreamPool

    await server.start_server()
    try:
        if (transport or TRANSPORT["name"]) == "pool":
            async with StreamPool() as pool:
                yield pool, str(server.make_url("")).rstrip("/")
        else:
            async with aiohttp.ClientSession() as session:
                yield session, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def both_transports():
    """An autouse fixture for a test module: every test runs over aiohttp and over the StreamPool."""
    import pytest

    @pytest.fixture(autouse=True, params=["aiohttp", "pool"])
    def transport(request):
        TRANSPORT["name"] = request.param
        yield request.param
        TRANSPORT["name"] = "aiohttp"

    return transport


class FakeVllm:
    def __init__(
        self,
        sse: bytes = GOOD_SSE,
        delay_s: float = 0.0,
        status: int = 200,
        *,
        plain_json: bool = False,
        hang_s: float = 0.0,
        api_key: str | None = None,
        metrics_text: str = "vllm:generation_tokens_total 1.0\n",
    ):
        self.sse, self.delay_s, self.status = sse, delay_s, status
        self.plain_json, self.hang_s, self.api_key = plain_json, hang_s, api_key
        self.metrics_text = metrics_text
        self.in_flight = 0
        self.max_in_flight = 0
        self.request_ids: list[str] = []
        self.bodies: list[dict] = []
        self.auth_headers: list[str | None] = []
        self.user_agents: list[str | None] = []  # of the chat requests: which transport sent them
        self.metrics_reads = 0
        self.resets = 0  # POST /reset_prefix_cache calls answered

    def _denied(self, request: web.Request) -> bool:
        self.auth_headers.append(request.headers.get("Authorization"))
        return self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        self.user_agents.append(request.headers.get("User-Agent"))
        self.bodies.append(await request.json())
        if self._denied(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        if self.hang_s:
            await asyncio.sleep(self.hang_s)
        if self.status != 200:
            return web.Response(status=self.status, text="engine is sad")
        if self.plain_json:
            return web.json_response(
                {"choices": [{"message": {"content": "ab"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
            )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for event in self.sse.split(b"\n\n"):
                if event.strip():
                    await resp.write(event + b"\n\n")
                    await asyncio.sleep(self.delay_s)
            return resp
        finally:
            self.in_flight -= 1

    async def metrics(self, request: web.Request) -> web.Response:
        self.metrics_reads += 1
        if self._denied(request):
            return web.Response(status=401)
        return web.Response(text=self.metrics_text)

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        self.resets += 1
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        return TestServer(app, host="127.0.0.1")


class EndlessVllm(FakeVllm):
    """A server that ignores max_tokens: every timed request streams content
    chunks (every ``gap_s``) until the client goes away; ``trickle`` sends SSE
    comments instead (bytes, never a token). Warm-up requests (id ending in
    ``.warmup``) get the normal short reply, so a run gets past its warm-up.
    ``closed`` counts the endless streams the client hung up on."""

    def __init__(self, gap_s: float = 0.005, trickle: bool = False, **kw):
        super().__init__(**kw)
        self.gap_s, self.trickle = gap_s, trickle
        self.closed = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-Request-Id", "").endswith(".warmup"):
            return await super().chat(request)
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        self.bodies.append(await request.json())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        event = b": still here\n\n" if self.trickle else b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        try:
            while True:
                await resp.write(event)
                await asyncio.sleep(self.gap_s)
        except (ConnectionError, asyncio.CancelledError):
            self.closed += 1
            raise
        finally:
            self.in_flight -= 1


@contextmanager
def threaded(*fakes: FakeVllm):
    """Serve each fake on 127.0.0.1 from a background event loop (for a
    command run in this thread or another process); yield their base URLs."""
    loop = asyncio.new_event_loop()
    runners, urls = [], []
    ready = threading.Event()

    async def start():
        for fake in fakes:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", fake.chat)
            app.router.add_get("/metrics", fake.metrics)
            app.router.add_get("/v1/models", fake.models)
            if getattr(fake, "serves_reset", True):  # a fake may play a server without dev mode
                app.router.add_post("/reset_prefix_cache", fake.reset_prefix_cache)
            runner = web.AppRunner(app, shutdown_timeout=0.2)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")
        ready.set()

    t = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    t.start()
    assert ready.wait(10), "the fake servers did not start"
    try:
        yield urls
    finally:

        async def stop():
            for r in runners:
                await r.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
