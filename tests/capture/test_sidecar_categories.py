"""Per-category live gauges: the category book (reply id -> category, engine
request id -> category), the proxy noting each request's category, the
rolling per-category acceptance, and one sidecar process with its proxy."""

from __future__ import annotations

import asyncio
import json
import math

import aiohttp
import pyarrow as pa
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.capture.categories import OTHER, CategoryBook, reply_id
from specdec.capture.proxy.record import RowMaker, request_category
from specdec.capture.proxy.rules import CategoryRule, CategoryRules
from specdec.capture.proxy.service import ProxySettings, start_proxy
from specdec.capture.proxy.writer import Recorder
from specdec.capture.sidecar.metrics import LiveMetrics
from tests.support.prometheus import NOW_NS, samples

SERVER = "http://s"


def test_engine_ids_resolve_to_the_reply_id_they_embed():
    book = CategoryBook()
    book.note("chatcmpl-sd.r.speculative.c1.00003", "code")  # the client's X-Request-Id inside
    book.note("chatcmpl-5f0c9a1e2b3d4c5e", "chat")  # vLLM's own random id
    book.note("cmpl-77", "structured")  # completions: one engine request per prompt, -<i>
    assert book.category_of("chatcmpl-sd.r.speculative.c1.00003-0123abcd") == "code"
    assert book.category_of("chatcmpl-5f0c9a1e2b3d4c5e-deadbeef") == "chat"
    assert book.category_of("cmpl-77-0-a1b2c3d4") == "structured"
    assert book.category_of("cmpl-77-1-a1b2c3d4") == "structured"
    assert book.category_of("chatcmpl-never-seen-0123abcd") is None


def test_the_book_is_bounded_in_ids_and_labels():
    book = CategoryBook(max_ids=2, max_categories=2)
    for i, cat in enumerate(["a", "b", "c", "a"]):
        book.note(f"r{i}", cat)
    assert len(book) == 2
    assert book.category_of("r0-00000000") is None  # evicted, oldest first
    assert (book.category_of("r2-00000000"), book.category_of("r3-00000000")) == (OTHER, "a")


def test_reply_id_from_the_first_bytes():
    assert reply_id(b'data: {"id":"chatcmpl-x\\"y","object":"chat.completion.chunk"}\n\n') == 'chatcmpl-x"y'
    assert reply_id(b'{"id": "cmpl-1", "choices": []}') == "cmpl-1"
    assert reply_id(b'data: {"choices":[]}\n\n') is None
    assert reply_id(b'{"id": 3}') is None


def test_request_category_as_the_recorder_gives_it():
    rules = CategoryRules(
        [CategoryRule(category="code", content=r"\bdef "), CategoryRule(category="chat", route="/v1/chat/completions")]
    )
    chat = json.dumps({"messages": [{"role": "user", "content": "def f(): pass"}]}).encode()
    assert request_category(rules, "/v1/chat/completions", "header-wins", chat) == "header-wins"
    assert request_category(rules, "/v1/chat/completions", None, chat) == "code"
    assert request_category(rules, "/v1/chat/completions", None, b'{"messages": []}') == "chat"
    assert request_category(rules, "/v1/completions", None, b'{"prompt": "undefined"}') == "unknown"
    assert request_category(rules, "/v1/completions", None, b"not json") == "unknown"
    assert request_category(CategoryRules(), "/v1/chat/completions", None, chat) == "unknown"


def _rows(ids_and_rounds):
    """METRIC_COLUMNS rows: (engine id, proposed, accepted) at NOW."""
    cols = {
        "engine_request_id": [],
        "process_token": [],
        "step_index": [],
        "tokens_proposed": [],
        "tokens_accepted": [],
        "draft_ms": [],
        "verify_ms": [],
        "wall_time_ns": [],
    }
    for step, (eid, k, a) in enumerate(ids_and_rounds):
        for name, value in (
            ("engine_request_id", eid),
            ("process_token", "1-a"),
            ("step_index", step),
            ("tokens_proposed", k),
            ("tokens_accepted", a),
            ("draft_ms", None),
            ("verify_ms", None),
            ("wall_time_ns", NOW_NS),
        ):
            cols[name].append(value)
    return pa.table(
        cols,
        schema=pa.schema(
            [
                ("engine_request_id", pa.string()),
                ("process_token", pa.string()),
                ("step_index", pa.int64()),
                ("tokens_proposed", pa.int64()),
                ("tokens_accepted", pa.int64()),
                ("draft_ms", pa.float64()),
                ("verify_ms", pa.float64()),
                ("wall_time_ns", pa.int64()),
            ]
        ),
    )


def test_rolling_acceptance_per_category_is_exact():
    book = CategoryBook()
    book.note("chatcmpl-a", "code")
    book.note("chatcmpl-b", "chat")
    m = LiveMetrics(SERVER, 60, book)
    m.observe_rounds(
        _rows(
            [
                ("chatcmpl-a-00000001", 4, 4),
                ("chatcmpl-a-00000001", 4, 2),
                ("chatcmpl-b-00000002", 4, 1),
                ("chatcmpl-b-00000002", 0, 0),
                ("chatcmpl-z-00000003", 4, 4),
            ]
        )
    )  # a request the proxy never saw
    got = samples(m.render(NOW_NS))
    lab = 'server="http://s"'
    assert got[f"specdec_acceptance_rate{{{lab}}}"] == 11 / 16  # every row, labelled or not
    assert got[f'specdec_category_acceptance_rate{{{lab},category="code"}}'] == 6 / 8
    assert got[f'specdec_category_acceptance_length{{{lab},category="code"}}'] == 1 + 6 / 2
    assert got[f'specdec_category_acceptance_rate{{{lab},category="chat"}}'] == 1 / 4
    assert got[f'specdec_category_window_verify_rounds{{{lab},category="chat"}}'] == 1
    assert not any('category="unknown"' in k for k in got)
    later = samples(m.render(NOW_NS + 61 * 10**9))  # the window moved past every row
    assert not any(k.startswith("specdec_category_") for k in later)
    assert math.isnan(later[f"specdec_acceptance_rate{{{lab}}}"])


def test_without_a_book_there_is_no_category_series():
    m = LiveMetrics(SERVER, 60)
    m.observe_rounds(_rows([("chatcmpl-a-00000001", 4, 4)]))
    assert "specdec_category_" not in m.render(NOW_NS)


def test_the_proxy_notes_each_request_category_under_its_reply_id(tmp_path):
    sse = (
        b'data: {"id":"chatcmpl-%s","choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"id":"chatcmpl-%s","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
        b"data: [DONE]\n\n"
    )

    async def chat(request: web.Request) -> web.StreamResponse:
        rid = request.headers.get("X-Request-Id", "random77").encode()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse % (rid, rid))
        return resp

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        upstream = TestServer(app, host="127.0.0.1")
        await upstream.start_server()
        rules = CategoryRules([CategoryRule(category="code", content=r"\bdef ")])
        book = CategoryBook()
        settings = ProxySettings(
            upstream=str(upstream.make_url("")).rstrip("/"), port=0, out_dir=tmp_path, content="keep"
        )
        running = await start_proxy(settings, Recorder(tmp_path, RowMaker(rules), 3600.0), book=book)
        try:
            async with aiohttp.ClientSession() as s:
                for headers, text in (
                    ({"X-Request-Id": "r1", "X-Specdec-Category": "structured"}, "x"),
                    ({"X-Request-Id": "r2"}, "def f(): pass"),
                    ({}, "hello"),
                ):
                    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}
                    async with s.post(running.url + "/v1/chat/completions", json=body, headers=headers) as r:
                        assert b"[DONE]" in await r.read()
        finally:
            await running.stop()
            await upstream.close()
        return book

    book = asyncio.run(go())
    assert book.category_of("chatcmpl-r1-0123abcd") == "structured"  # the header
    assert book.category_of("chatcmpl-r2-0123abcd") == "code"  # the rules
    assert book.category_of("chatcmpl-random77-0123abcd") == "unknown"  # neither
