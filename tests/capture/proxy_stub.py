"""Helpers for the proxy tests: a proxy started in front of a stub upstream on
the test's own loop, and an upstream that echoes what it was sent."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.capture.proxy import ProxySettings, start_proxy
from specdec.capture.proxy_record import RowMaker
from specdec.capture.proxy_writer import Recorder


@asynccontextmanager
async def proxied(upstream: TestServer, out_dir: Path, *, recorder: Recorder | None = None,
                  flush_s: float = 3600.0, content: str = "keep"):
    """Start ``upstream`` and a proxy in front of it; yield (session, direct
    URL, proxy URL, recorder); stop the proxy (final flush) and the upstream."""
    await upstream.start_server()
    direct = str(upstream.make_url("")).rstrip("/")
    settings = ProxySettings(upstream=direct, port=0, out_dir=out_dir, content=content, flush_s=flush_s)
    running = await start_proxy(settings, recorder)
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            yield session, direct, running.url, running.recorder
    finally:
        await running.stop()
        await upstream.close()


def recorder(out_dir: Path, flush_s: float = 3600.0, **kw) -> Recorder:
    return Recorder(out_dir, RowMaker(), flush_s, **kw)


async def until(predicate, timeout_s: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (a deadline, not a timed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


class EchoUpstream:
    """Answers every request with the headers and body it received (JSON),
    a Set-Cookie, an extra header, and gzip on /gzip."""

    def __init__(self):
        self.seen: list[dict] = []

    async def any(self, request: web.Request) -> web.Response:
        body = await request.read()
        seen = {"method": request.method, "path_qs": request.path_qs,
                "headers": [[k, v] for k, v in request.headers.items()], "body": body.decode()}
        self.seen.append(seen)
        if request.path == "/gzip":
            reply = {"choices": [{"message": {"content": "z"}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
            return web.Response(body=gzip.compress(json.dumps(reply).encode(), mtime=0),
                                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        return web.json_response(seen, headers={"X-Upstream": "yes", "Set-Cookie": "sid=abc; Path=/"})

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.any)
        return TestServer(app, host="127.0.0.1")
