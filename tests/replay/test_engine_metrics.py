import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.engines.metrics import parse_counters
from specdec.replay.http.metrics import read_counters
from tests.support.fake_server import serving


def test_parses_real_vllm_exposition(fixtures):
    # excerpt of a real vLLM 0.32 (CPU) /metrics after one 12-token request, ngram k=4
    text = (fixtures / "vllm_metrics_spec.prom").read_text()
    c = parse_counters(text)
    assert c == {
        "spec_num_drafts": 4.0,
        "spec_num_draft_tokens": 16.0,
        "spec_num_accepted_tokens": 7.0,
        "generation_tokens": 12.0,
        "prefix_cache_queries": None,
        "prefix_cache_hits": None,
    }  # not in this excerpt


def test_sums_label_sets_and_absent_counter_is_none():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 3.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1"} 2.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e9\n'
        "vllm:generation_tokens_total 10\n"
    )
    c = parse_counters(text)
    assert c["spec_num_drafts"] == 5.0
    assert c["generation_tokens"] == 10.0
    assert c["spec_num_accepted_tokens"] is None


def test_server_without_metrics_endpoint_gives_none_counters():
    async def go():
        # every path is a 404
        async with serving(TestServer(web.Application(), host="127.0.0.1")) as (s, base):
            return await read_counters(s, base)

    assert set(asyncio.run(go()).values()) == {None}
