"""Issue 43, item 1: ``specdec compat`` against misbehaving servers. Each fault
below ended a run in a traceback, hung it, or filled the matrix with one
outcome before; here each is a cell that says ``broken`` with the reason, a
bounded wait, or one run-level error that names the server.

The servers are ``CompatFake`` (tests/support/compat_server.py) with one
fault each (``Hostile``); a dead server is a socket that accepts and never
answers."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web

from specdec.experiments.compat import probing
from specdec.experiments.compat.probing import LONG_INPUT_CAP, Pair, probe_pair
from specdec.experiments.compat.watch import FAILURE_STREAK, ServerFailed
from specdec.http.urls import ClientSettings, parse_endpoint
from tests.support.compat_server import CompatFake, fake_pair

SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
DEEP = 100_000


class Hostile(CompatFake):
    """A ``CompatFake`` with one fault (``fault``) in its chat replies, its counters or its model list."""

    def __init__(self, speculative: bool, fault: str, **kw):
        super().__init__(speculative, **kw)
        self.fault = fault

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.fault == "hang":
            self.bodies.append(body)
            await asyncio.sleep(3600)
        if self.fault == "reset":  # headers and part of a body, then the connection goes
            self.bodies.append(body)
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = 1000
            await resp.prepare(request)
            await resp.write(b'{"choices": [{"mess')
            assert request.transport is not None
            request.transport.close()
            return resp
        feature = body.get("response_format") or body.get("stream")
        if self.fault == "deep_content" and body.get("response_format"):
            return web.json_response(_message("[" * DEEP + "]" * DEEP))
        if self.fault == "deep_body" and feature:
            text = '{"choices": [{"index": 0, "message": {"content": ' + "[" * DEEP + "]" * DEEP + "}}]}"
            return web.Response(text=text, content_type="application/json")
        if self.fault == "content_int" and feature:
            return web.json_response(_message(5))
        if self.fault in ("array_events", "endless", "trickle") and body.get("stream"):
            return await self._bad_stream(request)
        return await super().chat(request)

    async def _bad_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.fault == "array_events":
            await resp.write(b'data: [{"choices": []}]\n\ndata: [DONE]\n\n')
            return resp
        event = json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}}]})
        while True:  # never ends: content as fast as it goes, or a keep-alive comment now and then
            await resp.write(f"data: {event}\n\n".encode() if self.fault == "endless" else b": ping\n\n")
            await asyncio.sleep(0 if self.fault == "endless" else 0.02)

    async def metrics(self, request: web.Request) -> web.Response:
        page = await super().metrics(request)
        assert isinstance(page.text, str)
        if self.fault == "nan_counter":
            return web.Response(text=page.text + "vllm:spec_decode_num_draft_tokens_total NaN\n")
        if self.fault == "negative_counter":
            lines = [ln for ln in page.text.splitlines() if "num_accepted_tokens" not in ln]
            return web.Response(text="\n".join([*lines, "vllm:spec_decode_num_accepted_tokens_total -6.0", ""]))
        if self.fault == "slow_metrics":
            await asyncio.sleep(5)
        return page

    async def models(self, request: web.Request) -> web.Response:
        if self.fault == "huge_context":
            return web.json_response({"data": [{"id": "fake-model", "max_model_len": 10**12}]})
        return await super().models(request)


def _message(content) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


def run_pair(baseline, speculative, only=None, settings=SETTINGS, repeats=1):
    async def go():
        async with fake_pair(baseline, speculative) as (b, s):
            pair = Pair("fake", "0", "ngram", parse_endpoint(b), parse_endpoint(s), settle_s=0.0)
            return await probe_pair(pair, settings, "t1", echo=lambda _: None, only=only, repeats=repeats)

    cells, _ = asyncio.run(go())
    return {c.probe: c for c in cells}


@pytest.mark.parametrize(
    "fault, probe, says",
    [
        # a JSON output 100k levels deep: RecursionError in the JSON check before
        ("deep_content", "json_object", "nested more than 64 deep"),
        # a reply body 100k levels deep: RecursionError in the body read before
        ("deep_body", "json_object", "malformed_reply: malformed reply: the reply: not JSON"),
        ("content_int", "json_object", "choices[0].message.content is a int"),  # TypeError before
        ("array_events", "stream", "a stream event is a list"),  # AttributeError before
    ],
)
def test_a_malformed_reply_is_a_broken_cell_with_the_reason(fault, probe, says):
    cells = run_pair(CompatFake(False), Hostile(True, fault), only={probe, "n2"})
    cell = cells[probe]
    assert cell.outcome == "broken", cell.detail
    assert says in cell.detail or says in (cell.speculative_validity_detail or ""), cell.detail
    assert cells["n2"].outcome == "works"  # the other probe of the run still measured


def test_a_malformed_reply_in_the_baseline_is_broken_too():
    cells = run_pair(Hostile(False, "content_int"), CompatFake(True), only={"json_object"})
    assert cells["json_object"].outcome == "broken"
    assert "the baseline arm's reply failed" in cells["json_object"].detail


def test_every_probe_is_measured_when_one_streams_json_arrays():
    """The issue's case: the run ended in an AttributeError after 9 cells; now every cell is made."""
    cells = run_pair(CompatFake(False), Hostile(True, "array_events"))
    streamed = {"stream", "json_schema_stream", "tool_choice_named_stream"}
    assert all(cells[p].outcome == "broken" for p in streamed)
    assert len(cells) == 26 and {c.outcome for p, c in cells.items() if p not in streamed} == {"works"}


@pytest.mark.parametrize("fault", ["nan_counter", "negative_counter"])
def test_a_nan_or_negative_counter_reads_as_not_measured(fault):
    cells = run_pair(CompatFake(False), Hostile(True, fault), only={"json_object"})
    cell = cells["json_object"]
    if fault == "nan_counter":  # ValueError before
        assert cell.draft_tokens is None and cell.outcome == "not tested", cell.detail
    else:
        assert cell.draft_tokens == 8 and cell.accepted_tokens is None, cell
        assert cell.outcome == "works" and "acceptance per token not measured" in cell.detail


def test_a_huge_max_model_len_is_capped_by_what_the_probe_needs():
    """A max_model_len of 10^12: a MemoryError while building the long input before."""
    cells = run_pair(Hostile(False, "huge_context"), CompatFake(True), only={"near_max_length"})
    assert f"max_model_len {LONG_INPUT_CAP}" in cells["near_max_length"].output_constraint


@pytest.mark.parametrize("fault, kind", [("endless", "overlong_reply"), ("trickle", "request_wall_timeout")])
def test_a_stream_that_never_ends_is_bounded(fault, kind):
    """Content without end: the length limit; keep-alive comments without end: the wall limit
    (request timeout 0.5 s plus 5 ms per requested token here). No cell at all came before."""
    settings = ClientSettings(connect_timeout_s=1, request_timeout_s=0.5, wall_s_per_token=0.005)
    started = time.monotonic()
    cells = run_pair(CompatFake(False), Hostile(True, fault), only={"stream"}, settings=settings)
    assert time.monotonic() - started < 10
    assert cells["stream"].outcome == "broken" and kind in cells["stream"].detail, cells["stream"].detail


@pytest.mark.parametrize("arm", ["baseline", "speculative"])
def test_a_server_that_resets_every_reply_is_one_run_level_error(arm):
    """Before: 24 cells 'refused' (speculative) or 'not offered' (baseline), and exit 0."""
    fakes = [CompatFake(False), CompatFake(True)]
    fakes[arm == "speculative"] = Hostile(arm == "speculative", "reset")
    with pytest.raises(ServerFailed) as err:
        run_pair(*fakes)
    assert f"the {arm} server at http://127.0.0.1:" in str(err.value)
    assert f"failed each of its first {FAILURE_STREAK} requests" in str(err.value)
    assert len(fakes[arm == "speculative"].bodies) == FAILURE_STREAK  # it stopped there


@pytest.mark.parametrize("arm", ["baseline", "speculative"])
def test_a_dead_server_stops_the_run_within_the_timeouts_given(arm):
    """A server that accepts connections and never answers: the run stops within one request's
    bounds (connect plus request timeout), with an error naming it (before: about 78 requests of
    60 s each at the default timeouts; no cell in 170 s)."""
    settings = ClientSettings(connect_timeout_s=0.5, request_timeout_s=0.3)

    async def go():
        async def hang(reader, writer):
            await asyncio.sleep(3600)

        dead = await asyncio.start_server(hang, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{dead.sockets[0].getsockname()[1]}"
        async with dead, fake_pair(CompatFake(False), CompatFake(True)) as (b, s):
            urls = {"baseline": b, "speculative": s} | {arm: url}
            pair = Pair("fake", "0", "ngram", parse_endpoint(urls["baseline"]), parse_endpoint(urls["speculative"]))
            started = time.monotonic()
            with pytest.raises(ServerFailed) as err:
                await probe_pair(pair, settings, "t1", echo=lambda _: None)
            return url, time.monotonic() - started, str(err.value)

    url, took, message = asyncio.run(go())
    assert f"the {arm} server at {url} gave no reply to GET /v1/models" in message
    assert took < 2 * (settings.connect_timeout_s + settings.request_timeout_s), took


def test_a_server_whose_chat_replies_never_come_stops_after_a_streak_within_the_timeouts():
    """/v1/models answers, every chat request hangs: FAILURE_STREAK requests in a row without a reply,
    each bounded by the request timeout, then one error naming the server."""
    settings = ClientSettings(connect_timeout_s=0.5, request_timeout_s=0.3)
    hung = Hostile(True, "hang")
    started = time.monotonic()
    with pytest.raises(ServerFailed) as err:
        run_pair(CompatFake(False), hung, settings=settings)
    took = time.monotonic() - started
    assert f"gave no reply to {FAILURE_STREAK} requests in a row" in str(err.value)
    assert "the speculative server at http://127.0.0.1:" in str(err.value)
    assert len(hung.bodies) == FAILURE_STREAK
    # the streak's requests, and the counter reads around them (fast here), each within the request timeout
    assert took < FAILURE_STREAK * settings.request_timeout_s + 3, took


def test_metrics_reads_follow_the_request_timeout():
    """A /metrics that takes 5 s: read as not measured after the request timeout, not a fixed 30 s."""
    settings = ClientSettings(connect_timeout_s=0.5, request_timeout_s=0.3)

    async def go():
        async with fake_pair(CompatFake(False), Hostile(True, "slow_metrics")) as (_b, s):
            import aiohttp

            async with aiohttp.ClientSession() as session:
                started = time.monotonic()
                got = await probing.settled(session, parse_endpoint(s), settings, None, 0.0)
                return got, time.monotonic() - started

    got, took = asyncio.run(go())
    assert got is None and took < 2, took
