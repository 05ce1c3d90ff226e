"""A local aiohttp server that replays recorded vLLM SSE streams (no engine)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer


@asynccontextmanager
async def serving(server: TestServer):
    """Start `server`; yield (client session, base URL); close both."""
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield session, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


class FakeVllm:
    def __init__(self, sse: bytes, delay_s: float = 0.0, status: int = 200):
        self.sse, self.delay_s, self.status = sse, delay_s, status
        self.in_flight = 0
        self.max_in_flight = 0
        self.request_ids: list[str] = []
        self.bodies: list[dict] = []

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        self.bodies.append(await request.json())
        if self.status != 200:
            return web.Response(status=self.status, text="engine is sad")
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
        return web.Response(text="vllm:generation_tokens_total 1.0\n")

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)
        return TestServer(app, host="127.0.0.1")
