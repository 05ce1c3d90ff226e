"""A fake OpenAI-compatible server for ``specdec compat``'s probes: it reads
each probe's feature from the request body and answers as an engine that
honours it would (JSON for ``response_format``, a tool call for ``tools``,
``n`` choices, logprobs, a stop string left out, ...), streamed or not, and
exports vLLM's speculation counters when it plays the speculative arm
(each request: 2 verify rounds, 8 draft tokens, 6 accepted).

Faults on purpose, in the speculative arm only: ``invalid_json`` answers a
``json_schema`` request with JSON that violates the schema; ``refuse_tools``
refuses any request with ``tools`` (HTTP 400, ``TOOLS_ERROR``);
``no_drafts_with`` proposes no draft for requests holding that body key.
In either arm: ``refuse_key`` refuses (HTTP 400) any request holding that body key.
``slow_with`` (speculative arm): requests holding that body key take ``slow_s``
longer (the gain falls with the feature while acceptance holds); ``base_s``:
every request takes that long at least (both arms). Streamed replies come in
``pieces`` deltas ``chunk_s`` apart (tool calls streamed as deltas too); with
``stall_with``, a streamed request holding that body key waits ``stall_end_s``
before its last delta (a stall at the closing brace; either arm). ``drop_hits``:
a request whose ``cache_salt`` was seen counts that many of its 10 prompt tokens
as misses (the last block dropped from the prefix cache, as vLLM #53670).
``slow_once_with``: the first request holding that body key takes ``slow_once_s``
longer (one stalled pair; either arm).

Every request is logged (``requests``: its X-Request-Id, completion tokens and
the speculation counts it added) so a test can write the capture rows an
engine with the plugin would have written. Both arms export the
generation-token counter; a request with a ``cache_salt`` seen before counts
its 10 prompt tokens as prefix cache hits (vLLM's prefix cache counters).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

TOOLS_ERROR = 'Speculative decoding does not support "tools" in this build\n(request rejected)'
DEFAULT_TEXT = "def f(x):\n    total = 0\n    for n in x:\n        total += n * n\n    return total"


class CompatFake:
    def __init__(
        self,
        speculative: bool,
        *,
        invalid_json: bool = False,
        refuse_tools: bool = False,
        no_drafts_with: str | None = None,
        refuse_key: str | None = None,
        max_model_len: int = 512,
        slow_with: str | None = None,
        slow_s: float = 0.15,
        base_s: float = 0.0,
        pieces: int = 2,
        chunk_s: float = 0.0,
        stall_with: str | None = None,
        stall_end_s: float = 0.0,
        drop_hits: int = 0,
        slow_once_with: str | None = None,
        slow_once_s: float = 0.0,
    ):
        self.speculative, self.invalid_json, self.refuse_tools = speculative, invalid_json, refuse_tools
        self.no_drafts_with, self.max_model_len = no_drafts_with, max_model_len
        self.refuse_key = refuse_key
        self.slow_with, self.slow_s, self.base_s = slow_with, slow_s, base_s
        self.pieces, self.chunk_s, self.stall_with, self.stall_end_s = pieces, chunk_s, stall_with, stall_end_s
        self.drop_hits = drop_hits
        self.slow_once_with, self.slow_once_s = slow_once_with, slow_once_s
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generation": 0, "queries": 0, "hits": 0}
        self.bodies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # request_id, tokens, drafts, draft_tokens, accepted
        self.salts: set[str] = set()

    def _text(self, body: dict[str, Any]) -> tuple[str, list[dict[str, str]], int]:
        """(content, tool calls, completion tokens) for one choice."""
        fmt = body.get("response_format") or {}
        so = body.get("structured_outputs") or {}
        if (
            body.get("tools")
            and body.get("tool_choice") in ("auto", "required")
            or isinstance(body.get("tool_choice"), dict)
        ):
            return "", [{"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}], 6
        if fmt.get("type") == "json_object":
            return json.dumps({"city": "Paris", "country": "France"}), [], 10
        if fmt.get("type") == "json_schema":
            capital: Any = "yes" if self.speculative and self.invalid_json else True
            return json.dumps({"city": "Paris", "country": "France", "is_capital": capital}), [], 10
        if "regex" in so:
            return "555-1234, 555-1234, 555-1234", [], 26
        if "choice" in so:
            return so["choice"][0], [], 1
        if body.get("logit_bias"):
            return "yes yes yes yes", [], 4
        if "min_tokens" in body:
            return "Paris" + " ." * (body["min_tokens"] - 1), [], body["min_tokens"]
        if body.get("stop"):
            return DEFAULT_TEXT.split(body["stop"][0])[0], [], 4
        return DEFAULT_TEXT, [], 8

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.refuse_key is not None and self.refuse_key in body:
            return web.json_response({"error": f"{self.refuse_key!r} is not supported"}, status=400)
        if self.speculative and self.refuse_tools and body.get("tools"):
            return web.json_response({"error": {"message": TOOLS_ERROR, "code": 400}}, status=400)
        drafts = self.speculative and not (self.no_drafts_with and self.no_drafts_with in body)
        if drafts:
            self.counters["drafts"] += 2
            self.counters["draft_tokens"] += 8
            self.counters["accepted"] += 6
        await asyncio.sleep(self.base_s)  # a floor under every request: ratios near 1 instead of timer noise
        if self.speculative and self.slow_with and self.slow_with in body:
            await asyncio.sleep(self.slow_s)
        if self.slow_once_with is not None and self.slow_once_with in body:
            self.slow_once_with = None  # the first such request only: one pair of the cell stalls
            await asyncio.sleep(self.slow_once_s)
        salt = body.get("cache_salt")
        if salt is not None:
            self.counters["queries"] += 10
            self.counters["hits"] += 10 - self.drop_hits if salt in self.salts else 0
            self.salts.add(salt)
        text, calls, tokens = self._text(body)
        n = int(body.get("n") or 1)
        self.counters["generation"] += tokens * n
        self.requests.append(
            {
                "request_id": request.headers.get("X-Request-Id"),
                "tokens": tokens * n,
                "drafts": 2 if drafts else 0,
                "draft_tokens": 8 if drafts else 0,
                "accepted": 6 if drafts else 0,
            }
        )
        top = int(body.get("top_logprobs") or 0)
        logprobs = (
            {
                "content": [{"token": "t", "logprob": -0.1, "top_logprobs": [{"token": "t", "logprob": -0.1}] * top}]
                * tokens
            }
            if body.get("logprobs")
            else None
        )
        tool_calls = [{"id": f"call_{i}", "type": "function", "function": c} for i, c in enumerate(calls)]
        usage = {"prompt_tokens": 10, "completion_tokens": tokens * n}
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text or None, "tool_calls": tool_calls},
                    "finish_reason": finish,
                    "logprobs": logprobs,
                }
                for i in range(n)
            ]
            return web.json_response({"choices": choices, "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        stall = self.stall_end_s if self.stall_with is not None and self.stall_with in body else 0.0
        for i in range(n):
            deltas = _deltas(text, tool_calls, self.pieces)
            for j, delta in enumerate(deltas):
                if j:
                    await asyncio.sleep(stall if j == len(deltas) - 1 and stall else self.chunk_s)
                event = {"choices": [{"index": i, "delta": delta, "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(event)}\n\n".encode())
            last = {"choices": [{"index": i, "delta": {}, "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(last)}\n\n".encode())
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(self, request: web.Request) -> web.Response:
        c = self.counters
        text = (
            f"vllm:generation_tokens_total {c['generation']}.0\n"
            f"vllm:prefix_cache_queries_total {c['queries']}.0\n"
            f"vllm:prefix_cache_hits_total {c['hits']}.0\n"
        )
        if not self.speculative:
            return web.Response(text=text)
        return web.Response(
            text=text
            + (
                f"vllm:spec_decode_num_drafts_total {c['drafts']}.0\n"
                f"vllm:spec_decode_num_draft_tokens_total {c['draft_tokens']}.0\n"
                f"vllm:spec_decode_num_accepted_tokens_total {c['accepted']}.0\n"
            )
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake-model", "max_model_len": self.max_model_len}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") or body.get("content") or ""
        return web.json_response({"tokens": [42 + i for i, _ in enumerate(text.split())]})

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        return TestServer(app, host="127.0.0.1")


@asynccontextmanager
async def fake_pair(baseline: CompatFake, speculative: CompatFake):
    """Serve both fakes; yield their base URLs (baseline, speculative)."""
    servers = [baseline.server(), speculative.server()]
    for s in servers:
        await s.start_server()
    try:
        yield tuple(str(s.make_url("")).rstrip("/") for s in servers)
    finally:
        for s in servers:
            await s.close()


@contextmanager
def threaded_pair(baseline: CompatFake, speculative: CompatFake) -> Iterator[tuple[str, str]]:
    """Serve both fakes from a background event loop (for a command run in this thread); yield their URLs."""
    loop = asyncio.new_event_loop()
    servers = [baseline.server(), speculative.server()]
    ready = threading.Event()

    async def start() -> None:
        for s in servers:
            await s.start_server(loop=loop)
        ready.set()

    t = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    t.start()
    assert ready.wait(10), "the fake servers did not start"
    try:
        b, s = (str(x.make_url("")).rstrip("/") for x in servers)
        yield b, s
    finally:

        async def stop() -> None:
            for x in servers:
                await x.close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)


def _deltas(text: str, tool_calls: list[dict[str, Any]], pieces: int) -> list[dict[str, Any]]:
    """A streamed choice's deltas: the text in ``pieces`` parts, or each tool call's name and then its
    arguments in ``pieces`` parts (the closing brace in the last)."""
    if not tool_calls:
        cut = [len(text) * k // pieces for k in range(pieces + 1)]
        return [{"content": text[a:b]} for a, b in zip(cut, cut[1:])]
    out: list[dict[str, Any]] = []
    for ti, call in enumerate(tool_calls):
        fn = call["function"]
        head = {"index": ti, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}
        out.append({"tool_calls": [head]})
        args = fn["arguments"]
        cut = [len(args) * k // pieces for k in range(pieces + 1)]
        out += [{"tool_calls": [{"index": ti, "function": {"arguments": args[a:b]}}]} for a, b in zip(cut, cut[1:])]
    return out
