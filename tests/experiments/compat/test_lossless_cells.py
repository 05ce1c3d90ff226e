"""The lossless cells of the matrix (issue 43, item 3) against fake greedy servers that speak either
protocol: vLLM's chat stream with logprobs and token ids, or llama-server's ``/apply-template`` +
``/completion`` with ``n_probs`` (whose chat stream carries no logprobs). An honest speculative arm
works on both; one that takes the baseline's runner-up where the top two are within the near-tie
margin is a near-tie and still works; one that emits another token, or takes the runner-up at a
wide margin, is broken, and the detail names the prompt, the position and the margin; one that
drafts nothing is not tested. An external pair's protocol is found on its baseline."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from specdec.experiments.compat import lossless_cells
from specdec.experiments.compat.probing import Pair, probe_pair
from specdec.http.urls import ClientSettings, parse_endpoint
from tests.support.fake_server import FakeVllm

SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
#: the baseline's margin (top-1 minus top-2, nats) at every position but NARROW_AT, where it is NARROW
WIDE, NARROW, NARROW_AT = 3.0, 0.1, 5


def greedy(text: str, n: int) -> list[int]:
    """The fake model's greedy tokens for a prompt: a fixed sequence of ids 10..49."""
    return [10 + (sum(map(ord, text)) + 7 * i) % 40 for i in range(n)]


def runner_up(t: int) -> int:
    return 50 + t  # every position's second choice: another id, never a greedy one


class Greedy(FakeVllm):
    """A greedy model behind either protocol. ``llama``: llama-server's endpoints (its chat stream
    without logprobs); ``flip``: (position, 'runner-up' | 'other') where this arm departs from the
    greedy sequence; ``draft``: speculation counter tokens per request (0: a baseline)."""

    def __init__(self, llama: bool = False, flip: tuple[int, str] | None = None, draft: int = 0, **kw):
        super().__init__(**kw)
        self.llama, self.flip, self.draft = llama, flip, draft
        self.requests = 0

    def tokens(self, text: str, n: int) -> list[int]:
        ids = greedy(text, n)
        if self.flip is not None:
            at, how = self.flip
            ids[at] = runner_up(ids[at]) if how == "runner-up" else 99
            ids[at + 1 :] = greedy(text + "!", n)[at + 1 :]  # after a divergence the texts go their own ways
        return ids

    def entry(self, text: str, i: int, t: int) -> tuple[float, list[tuple[int, float]]]:
        g = greedy(text, i + 1)[i]
        margin = NARROW if i == NARROW_AT else WIDE
        return (-0.05 if t == g else -0.05 - margin), [(g, -0.05), (runner_up(g), -0.05 - margin)]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests += 1
        text = body["messages"][-1]["content"]
        ids = self.tokens(text, body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]}]
        for i, t in enumerate(ids):
            lp, top = self.entry(text, i, t)
            logprobs = None
            if body.get("logprobs") and not self.llama:
                logprobs = {
                    "content": [
                        {
                            "token": f"token_id:{t}",
                            "logprob": lp,
                            "top_logprobs": [{"token": f"token_id:{x}", "logprob": v} for x, v in top],
                        }
                    ]
                }
            events.append({"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": logprobs}]})
        events.append({"choices": [], "usage": {"prompt_tokens": len(text), "completion_tokens": len(ids)}})
        for e in events:
            await resp.write(b"data: " + json.dumps(e).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def apply_template(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": body["messages"][-1]["content"]})

    async def completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        text, n = body["prompt"], body["n_predict"]
        ids = self.tokens(text, n)
        probs = []
        for i, t in enumerate(ids):
            lp, top = self.entry(text, i, t)
            probs.append(
                {"id": t, "token": "x", "bytes": [120], "logprob": lp,
                 "top_logprobs": [{"id": x, "token": "x", "bytes": [120], "logprob": v} for x, v in top]}
            )  # fmt: skip
        return web.json_response(
            {"content": "x" * n, "tokens": ids, "completion_probabilities": probs, "tokens_predicted": n,
             "tokens_evaluated": len(text)}
        )  # fmt: skip

    async def metrics(self, request: web.Request) -> web.Response:
        n, d = self.requests, self.draft
        return web.Response(
            text=(
                f"vllm:spec_decode_num_drafts_total {n * (d > 0)}\n"
                f"vllm:spec_decode_num_draft_tokens_total {n * d}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {n * d // 2}\n"
                f"vllm:generation_tokens_total {n * 48}\n"
            )
        )

    def server(self):
        srv = super().server()
        srv.app.router.add_post("/apply-template", self.apply_template)
        srv.app.router.add_post("/completion", self.completion)
        return srv


def cells_of(baseline: Greedy, speculative: Greedy, protocol: str | None = None, dtype: str | None = None):
    async def go():
        b, s = baseline.server(), speculative.server()
        await b.start_server()
        await s.start_server()
        try:
            urls = (parse_endpoint(str(x.make_url(""))) for x in (b, s))
            pair = Pair("fake", "0", "ngram", *urls, settle_s=0.0, lossless_protocol=protocol, dtype=dtype)
            return await probe_pair(
                pair, SETTINGS, "t1", echo=lambda _: None, only=frozenset({lossless_cells.NAME}), lossless_levels=(1,)
            )
        finally:
            await b.close()
            await s.close()

    cells, sent = asyncio.run(go())
    (cell,) = cells
    return cell, sent


@pytest.mark.parametrize("llama", [False, True], ids=["chat stream", "llama-server completion"])
def test_an_honest_drafting_arm_works_on_either_protocol(llama):
    cell, sent = cells_of(Greedy(llama=llama), Greedy(llama=llama, draft=4), "completion" if llama else "chat")
    n = len(lossless_cells.PROMPTS)
    assert cell.outcome == "works" and cell.probe == "lossless_greedy.c1" and cell.feature == "lossless", cell.detail
    assert (cell.lossless_identical, cell.lossless_near_ties, cell.lossless_suspect) == (n, 0, 0)
    assert cell.identical is True and cell.draft_tokens == 4 * n and cell.requests_sent == 2 * n
    how = "/completion with n_probs" if llama else "chat stream with logprobs"
    assert how in cell.detail
    (entry,) = sent
    assert (
        entry["design"]["levels"] == [1]
        and len(entry["cells"]["lossless_greedy.c1"]["speculative"]["request_ids"]) == n
    )


@pytest.mark.parametrize("llama", [False, True])
def test_the_runner_up_within_the_margin_is_a_near_tie_and_the_cell_still_works(llama):
    spec = Greedy(llama=llama, draft=4, flip=(NARROW_AT, "runner-up"))
    cell, _ = cells_of(Greedy(llama=llama), spec, "completion" if llama else "chat")
    assert cell.outcome == "works", cell.detail
    assert cell.lossless_near_ties == len(lossless_cells.PROMPTS) and cell.lossless_suspect == 0
    assert cell.identical is False


@pytest.mark.parametrize(
    "flip, dtype, why",
    [
        ((2, "other"), None, "token 99"),  # not the runner-up at all
        ((2, "runner-up"), None, "margin 3"),  # the runner-up, at a margin of whole nats
        ((NARROW_AT, "runner-up"), "float32", "margin 0.1"),  # within bfloat16's margin, not float32's
    ],
)
def test_a_divergence_nothing_explains_is_broken_and_named(flip, dtype, why):
    cell, _ = cells_of(Greedy(llama=True), Greedy(llama=True, draft=4, flip=flip), "completion", dtype)
    assert cell.outcome == "broken" and cell.lossless_suspect == len(lossless_cells.PROMPTS), cell.detail
    assert f"at token {flip[0]}" in cell.detail and why in cell.detail and "g0" in cell.detail


def test_no_draft_is_not_tested():
    cell, _ = cells_of(Greedy(), Greedy(draft=0), "chat")
    assert cell.outcome == "not tested" and "nothing was drafted" in cell.detail, cell.detail


def test_an_external_pairs_protocol_is_found_on_its_baseline():
    """llama-server's chat stream carries no logprobs: the cell asks its /completion instead."""
    cell, _ = cells_of(Greedy(llama=True), Greedy(llama=True, draft=4), protocol=None)
    assert cell.outcome == "works" and "/completion" in cell.detail, cell.detail
    cell, _ = cells_of(Greedy(), Greedy(draft=4), protocol=None)
    assert cell.outcome == "works" and "chat stream" in cell.detail, cell.detail


def test_the_near_tie_margins_are_the_marts():
    """The cell reads the same reasoned margins as sql/intermediate/lossless/int_lossless_settings.sql."""
    from pathlib import Path

    sql = (Path(__file__).parents[3] / "sql/intermediate/lossless/int_lossless_settings.sql").read_text()
    assert "when 'float32' then 0.001 when 'float16' then 0.03 else 0.25" in sql
    assert lossless_cells.NEAR_TIE == {"float32": 0.001, "float16": 0.03, "bfloat16": 0.25}
    assert lossless_cells.near_tie_threshold(None) == lossless_cells.near_tie_threshold("auto") == 0.25
