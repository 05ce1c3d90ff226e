"""The untimed passes read the arm's speculation counters before and after
(replay/passes/counters.py, Replayer._verify / _sample), against fake servers:
one whose draft counters move with every request (4 draft tokens per
request, one draft), one that exports no speculative counter at all."""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
from aiohttp import web

from specdec.replay.config import ReplayConfig
from specdec.replay.http.client import as_endpoint
from specdec.replay.progress import Progress
from specdec.replay.runner import Replayer, level_rows
from specdec.runfolder import pass_counters_part
from specdec.schemas.records import PassCounters
from specdec.traffic.io import BUNDLED, load_traffic
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving


class Drafting(FakeVllm):
    """A speculative server: one draft of 4 tokens, 2 accepted, per request answered."""

    async def metrics(self, request: web.Request) -> web.Response:
        n = len(self.request_ids)
        return web.Response(
            text=f"vllm:generation_tokens_total {10.0 * n}\n"
            f"vllm:spec_decode_num_drafts_total {float(n)}\n"
            f"vllm:spec_decode_num_draft_tokens_total {4.0 * n}\n"
            f"vllm:spec_decode_num_accepted_tokens_total {2.0 * n}\n"
        )


def _run(fake: FakeVllm, tmp_path, pass_name: str, n: int = 3) -> list[dict]:
    traffic = load_traffic(BUNDLED)
    cfg = ReplayConfig(traffic=BUNDLED, requests_per_level=n, progress=False, samples=2)
    rows = level_rows(traffic, cfg)

    async def go():
        runner = Replayer(cfg, "r", tmp_path, traffic, Progress(False))
        async with serving(fake.server()) as (s, base):
            if pass_name == "lossless_pass":
                await runner._lossless_pass(s, "speculative", as_endpoint(base), rows, 2)
            else:
                await runner._sampling_pass(
                    s, "speculative", as_endpoint(base), [r.model_copy(update={"temperature": 0.7}) for r in rows], 2
                )

    asyncio.run(go())
    table = pq.read_table(pass_counters_part(tmp_path, "speculative"))
    assert table.schema.names == list(PassCounters.model_fields)
    return table.to_pylist()


def test_the_lossless_pass_is_bracketed_by_counter_reads(tmp_path):
    fake = Drafting(GOOD_SSE)
    got = _run(fake, tmp_path, "lossless_pass")
    assert [(r["pass_kind"], r["position"], r["level"], r["arm"]) for r in got] == [
        ("lossless_pass", "before", 2, "speculative"),
        ("lossless_pass", "after", 2, "speculative"),
    ]
    before, after = got
    n = sum(rid.endswith(".lossless") for rid in fake.request_ids)
    assert n == 3
    assert (before["spec_num_drafts"], before["spec_num_draft_tokens"]) == (0.0, 0.0)
    assert (
        after["spec_num_drafts"],
        after["spec_num_draft_tokens"],
        after["spec_num_accepted_tokens"],
        after["generation_tokens"],
    ) == (3.0, 12.0, 6.0, 30.0)
    assert before["wall_time_ns"] <= after["wall_time_ns"]
    PassCounters.model_validate(after)


def test_a_server_without_speculative_counters_records_none(tmp_path):
    got = _run(FakeVllm(GOOD_SSE), tmp_path, "lossless_pass")  # its /metrics: generation tokens only
    assert [r["position"] for r in got] == ["before", "after"]
    assert all(r["spec_num_drafts"] is None and r["spec_num_draft_tokens"] is None for r in got)
    assert [r["generation_tokens"] for r in got] == [1.0, 1.0]


def test_the_sampling_pass_is_bracketed_too(tmp_path):
    fake = Drafting(GOOD_SSE)
    got = _run(fake, tmp_path, "sampling_pass")
    assert [(r["pass_kind"], r["position"]) for r in got] == [("sampling_pass", "before"), ("sampling_pass", "after")]
    sent = sum(rid.endswith(".sample") for rid in fake.request_ids)
    assert sent > 0 and got[1]["spec_num_draft_tokens"] - got[0]["spec_num_draft_tokens"] == 4.0 * sent
