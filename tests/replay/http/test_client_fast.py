"""The client's fast stream reading: vLLM-shaped content chunks read by a
pattern instead of json.loads, lines split from raw reads, and the idle
watchdog that replaces aiohttp's per-arrival read timer while streaming.
Each test compares with the general path (forced by an ``on_chunk``) or
with a hand-written expectation."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.replay.http.client import ClientSettings, stream_payload
from specdec.replay.http.sse import FAST_CHUNK as _FAST_CHUNK
from tests.support.fake_server import both_transports, serving

transport = both_transports()

HEAD = '{"id":"chatcmpl-sd.r.1","object":"chat.completion.chunk","created":1795953683,"model":"m","choices":['


def vllm_event(
    text: str,
    n: int | None = None,
    finish: str | None = None,
    extra: str = ',"token_ids":null',
    ascii_only: bool = True,
) -> bytes:
    """A content chunk exactly as vLLM 0.32 writes it (per-chunk usage when n is
    given; non-ASCII text as escapes, or as raw UTF-8 with ascii_only=False)."""
    fin = "null" if finish is None else f'"{finish}"'
    usage = "" if n is None else f',"usage":{{"prompt_tokens":5,"total_tokens":{5 + n},"completion_tokens":{n}}}'
    body = (
        HEAD
        + '{"index":0,"delta":{"content":'
        + json.dumps(text, ensure_ascii=ascii_only)
        + '},"logprobs":null,"finish_reason":'
        + fin
        + extra
        + "}]"
        + usage
        + "}"
    )
    return b"data: " + body.encode() + b"\n\n"


ROLE = (
    b"data: "
    + (
        HEAD + '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
        '"finish_reason":null}],"prompt_token_ids":null}'
    ).encode()
    + b"\n\n"
)


def final(n: int) -> bytes:
    # %-formatting: the JSON's own braces would need doubling in a format string
    return (
        b"data: "
        + (
            HEAD + '],"usage":{"prompt_tokens":5,"total_tokens":%d,"completion_tokens":%d},'  # noqa: UP031
            '"metrics":{"speculative_decoding":{"num_spec_steps":3,"num_draft_tokens":12,'
            '"num_accepted_draft_tokens":4}}}' % (5 + n, n)
        ).encode()
        + b"\n\ndata: [DONE]\n\n"
    )


class Pieces:
    """Answers a chat request with the given byte pieces, written one by one."""

    def __init__(self, pieces: list[bytes], gap_s: float = 0.0):
        self.pieces, self.gap_s = pieces, gap_s

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in self.pieces:
            await resp.write(piece)
            await asyncio.sleep(self.gap_s)
        return resp

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return TestServer(app, host="127.0.0.1")


def run(pieces: list[bytes], gap_s: float = 0.0, general: bool = False, settings: ClientSettings | None = None):
    """One request; ``general`` forces the json.loads path (an on_chunk)."""
    seen: list[dict] = []

    async def go():
        async with serving(Pieces(pieces, gap_s).server()) as (s, base):
            return await stream_payload(
                s, base, {"model": "m", "messages": []}, "r1", settings, on_chunk=seen.append if general else None
            )

    return asyncio.run(go())


def facts(res) -> tuple:
    return (
        res.success,
        res.error_type,
        res.output_text,
        res.chunk_tokens,
        len(res.chunk_offsets_ms),
        res.finish_reason,
        res.prompt_tokens,
        res.output_tokens,
        (res.spec_num_steps, res.spec_num_draft_tokens, res.spec_num_accepted_tokens),
    )


STREAMS = {
    "per-chunk-usage": [
        ROLE,
        vllm_event("def", 1),
        vllm_event(" f(x):", 3),
        vllm_event("\n    ", 4),
        vllm_event('"q\u00e9"\t', 6),
        vllm_event(" \u4f60\u597d", 7, ascii_only=False),
        vllm_event(" end", 8, "length", ',"stop_reason":null,"token_ids":null'),
        final(8),
    ],
    "final-usage-only": [ROLE, vllm_event("a"), vllm_event("b"), vllm_event("c", finish="length"), final(3)],
    "count-goes-down": [vllm_event("a", 2), vllm_event("b", 1), final(2)],
    "empty-content-token": [vllm_event("a", 1), vllm_event("", 2), vllm_event("b", 3), final(3)],
    "no-token-ids-field": [vllm_event("a", 1, extra=""), vllm_event("b", 2, extra=""), final(2)],
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_fast_path_records_what_the_general_path_records(name):
    fast, general = run(STREAMS[name]), run(STREAMS[name], general=True)
    assert facts(fast) == facts(general)
    assert fast.success


def test_fast_path_reads_text_counts_and_usage():
    res = run(STREAMS["per-chunk-usage"])
    assert res.success and res.output_text == 'def f(x):\n    "q\u00e9"\t \u4f60\u597d end'
    assert res.chunk_tokens == [1, 3, 4, 6, 7, 8] and len(res.chunk_offsets_ms) == 6
    assert res.finish_reason == "length" and (res.prompt_tokens, res.output_tokens) == (5, 8)
    assert (res.spec_num_steps, res.spec_num_draft_tokens, res.spec_num_accepted_tokens) == (3, 12, 4)


def test_the_pattern_takes_vllm_content_chunks_and_nothing_malformed():
    good = vllm_event("hi", 1)[6:-2]
    assert _FAST_CHUNK(good) and json.loads(good)
    near_misses = [
        good.replace(b'"created":1795953683', b'"created":01795953683'),  # leading zero: not JSON
        good.replace(b'"hi"', b'"h\x01i"'),  # raw control character
        good.replace(b'"hi"', b'"h\\xi"'),  # invalid escape
        good + b"}",  # trailing garbage
        good[:-1],  # unclosed object
        good.replace(b'"index":0', b'"index":1'),  # another choice: general path
        ROLE[6:-2],  # role chunk: general path
    ]
    for data in near_misses:
        assert _FAST_CHUNK(data) is None, data


@pytest.mark.parametrize(
    "bad",
    [
        vllm_event("hi", 1).replace(b'"created":1795953683', b'"created":01795953683'),
        vllm_event("hi", 1).replace(b'"hi"', b'"h\\xi"'),
        vllm_event("hi", 1).replace(b"hi", b"h\xff"),  # not UTF-8
        vllm_event("hi", 1)[:-3] + b"\n\n",  # cut short
    ],
)
def test_a_malformed_vllm_shaped_event_is_still_a_bad_chunk(bad):
    res = run([vllm_event("a", 1), bad, final(2)])
    assert not res.success and res.error_type == "bad_chunk"
    assert res.output_text == "a"


def test_events_split_across_reads_and_joined_in_one_read():
    whole = b"".join(STREAMS["per-chunk-usage"])
    # every 7 bytes in its own write: lines arrive in pieces
    split = run([whole[i : i + 7] for i in range(0, len(whole), 7)], gap_s=0.001)
    # one write: every event in one read, all stamped with that read's arrival
    joined = run([whole])
    assert facts(split) == facts(joined) == facts(run(STREAMS["per-chunk-usage"]))
    assert len(set(joined.chunk_offsets_ms)) == 1
    assert split.chunk_offsets_ms == sorted(split.chunk_offsets_ms)


def test_crlf_lines_and_a_last_line_without_newline():
    body = b"".join(STREAMS["per-chunk-usage"]).replace(b"\n", b"\r\n").removesuffix(b"\r\n\r\n")
    res = run([body])
    assert res.success and res.chunk_tokens == [1, 3, 4, 6, 7, 8]


def test_a_stream_that_stalls_midway_times_out_with_what_arrived():
    settings = ClientSettings(connect_timeout_s=1.0, request_timeout_s=0.2)
    res = run([vllm_event("a", 1), vllm_event("b", 2), final(2)], gap_s=1.0, settings=settings)
    assert not res.success and res.error_type == "request_timeout" and res.http_status == 200
    assert res.output_text == "a"
    # a slow but steady stream never times out: each gap is below the limit
    res = run(
        [vllm_event("a", 1), vllm_event("b", 2), final(2)], gap_s=0.05, settings=ClientSettings(request_timeout_s=0.2)
    )
    assert res.success and res.output_text == "ab"


def test_someone_elses_cancellation_still_cancels():
    async def go():
        async with serving(Pieces([vllm_event("a", 1)] * 50, gap_s=0.05).server()) as (s, base):
            task = asyncio.create_task(
                stream_payload(s, base, {"model": "m", "messages": []}, "r1", ClientSettings(request_timeout_s=5.0))
            )
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
