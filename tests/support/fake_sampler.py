"""A fake vLLM that really samples, for the sampling check: each output token
is drawn independently from one fixed distribution over a small vocabulary
(``LOGITS``, softened by the request's temperature), with a ``random.Random``
seeded by the request's seed and prompt, so the same seed gives the same
sample and different seeds give different ones. It streams what vLLM
streams for the sampling pass (the prompt's token ids in the first chunk,
``token_id:<n>`` tokens with their raw logprob, usage, ``[DONE]``) and answers
the re-scoring request (``/v1/completions`` with ``prompt_logprobs``) with the
same raw logprobs: teacher forcing on the true model.

Defects to plant: ``ignore_seed`` (every seed gives the prompt's first
sample), ``temperature_factor`` (samples at a different temperature: another
distribution), ``report_offset`` (adds this to every logprob it *reports* for
its samples, sampling unchanged: a reporting artefact), ``prompt_ids=False``
(never sends the prompt's token ids).
"""

from __future__ import annotations

import json
import math
import random

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.fake_server import FakeVllm

#: Token id -> logit of the fake model; id 2 is end-of-sequence.
LOGITS = {2: -1.0, 10: 2.0, 11: 1.5, 12: 1.0, 13: 0.5, 14: 0.0, 15: -0.5, 16: -1.0}
EOS = frozenset({2})


def raw_logprobs() -> dict[int, float]:
    """log softmax of LOGITS (temperature 1: what vLLM reports by default)."""
    z = math.log(sum(math.exp(v) for v in LOGITS.values()))
    return {t: v - z for t, v in LOGITS.items()}


def prompt_token_ids(text: str) -> list[int]:
    """A stand-in tokenizer: one id (100..199) per character."""
    return [100 + ord(c) % 100 for c in text]


class FakeSampler(FakeVllm):
    def __init__(
        self,
        *,
        ignore_seed: bool = False,
        temperature_factor: float = 1.0,
        report_offset: float = 0.0,
        prompt_ids: bool = True,
        **kw,
    ):
        super().__init__(**kw)
        self.ignore_seed, self.temperature_factor = ignore_seed, temperature_factor
        self.report_offset, self.prompt_ids = report_offset, prompt_ids
        self.rescore_bodies: list[dict] = []

    def sample(self, text: str, seed: int, temperature: float, n: int) -> list[int]:
        t = max(temperature * self.temperature_factor, 1e-6)
        weights = [math.exp(v / t) for v in LOGITS.values()]
        rng = random.Random(f"{text}|{0 if self.ignore_seed else seed}")
        return rng.choices(list(LOGITS), weights=weights, k=n)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        text = body["messages"][-1]["content"]
        tokens = self.sample(text, body.get("seed", 0), body.get("temperature", 1.0), body["max_tokens"])
        lp = raw_logprobs()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]}
        if self.prompt_ids and body.get("return_token_ids"):
            first["prompt_token_ids"] = prompt_token_ids(text)
        events = [first]
        for t in tokens:
            entry = {"token": f"token_id:{t}", "logprob": lp[t] + self.report_offset, "top_logprobs": []}
            events.append({"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [entry]}}]})
        events.append({"choices": [], "usage": {"prompt_tokens": len(text), "completion_tokens": len(tokens)}})
        for e in events:
            await resp.write(b"data: " + json.dumps(e).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.rescore_bodies.append(body)
        lp = raw_logprobs()
        ids = body["prompt"]
        plp = [None] + [{str(t): {"logprob": lp.get(t, -1.0), "rank": 1, "decoded_token": "x"}} for t in ids[1:]]
        return web.json_response(
            {
                "choices": [{"index": 0, "text": "x", "prompt_logprobs": plp}],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": 1},
            }
        )

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        return TestServer(app, host="127.0.0.1")
