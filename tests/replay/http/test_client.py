import asyncio
import json
import time

import pytest

from specdec.replay.http.client import ERROR_TYPES, ClientSettings, build_payload, stream_chat
from specdec.schemas.records import TrafficRow
from tests.support.fake_server import GOOD_SSE, FakeVllm, both_transports, serving

transport = both_transports()

ROW = TrafficRow(prompt_id="p1", category="code", prompt="Repeat exactly", max_tokens=12)


def _run(fake: FakeVllm, url: str | None = None, settings: ClientSettings | None = None):
    async def go():
        async with serving(fake.server()) as (s, base):
            return await stream_chat(s, url or base, "m", ROW, "sd.t.speculative.c1.00000", settings)

    return asyncio.run(go())


def test_records_recorded_vllm_stream(fixtures):
    # a real vLLM 0.32 stream: 12 tokens, ngram k=4, per-request spec metrics in the usage chunk
    sse = (fixtures / "vllm_chat_stream_spec.sse").read_bytes()
    fake = FakeVllm(sse, delay_s=0.002)
    res = _run(fake)
    assert res.success and res.error_type is None and res.http_status == 200
    assert res.output_tokens == 12 and res.prompt_tokens == 41
    assert (res.spec_num_steps, res.spec_num_draft_tokens, res.spec_num_accepted_tokens) == (4, 16, 7)
    assert res.finish_reason == "length"
    assert res.output_text.startswith("Repeat exactly: alpha beta gamma")
    # one offset per content chunk, increasing, the first one is the TTFT
    assert len(res.chunk_offsets_ms) >= 2
    assert res.chunk_offsets_ms == sorted(res.chunk_offsets_ms)
    assert res.ttft_ms == res.chunk_offsets_ms[0]
    assert res.e2e_ms >= res.chunk_offsets_ms[-1]
    assert fake.request_ids == ["sd.t.speculative.c1.00000"]
    # this recording has usage in the final chunk only: per-chunk counts are unknown
    assert res.chunk_tokens == []
    body = fake.bodies[0]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True


@pytest.mark.parametrize("status", [401, 404, 500, 501])
def test_http_error_becomes_a_typed_row(status):
    res = _run(FakeVllm(b"", status=status))
    assert not res.success and res.error_type == "http_status" and res.http_status == status
    assert res.e2e_ms is None


def test_stream_error_event_is_recorded():
    sse = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"error": {"message": "EngineDeadError"}}\n\n'
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "stream_error" and "EngineDeadError" in res.error_message
    assert res.output_text == "hi"  # what arrived before the error is kept


def test_stream_cut_off_before_done_is_a_failure():
    # content and even usage, but the server closed before [DONE]
    sse = GOOD_SSE.replace(b"data: [DONE]\n\n", b"")
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "stream_truncated"
    assert res.output_text == "ab"
    sse = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'  # no usage, no [DONE]
    assert _run(FakeVllm(sse)).error_type == "stream_truncated"


def test_stream_without_usage_is_a_failure():
    sse = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "no_usage"


def test_usage_with_non_integer_counts_is_not_trusted():
    sse = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[],"usage":{"completion_tokens":"12"}}\n\ndata: [DONE]\n\n'
    )
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "no_usage" and res.output_tokens is None


def test_plain_json_reply_is_not_a_stream():
    res = _run(FakeVllm(plain_json=True))
    assert not res.success and res.error_type == "not_streamed" and res.http_status == 200


def test_bad_json_event_is_a_typed_failure():
    res = _run(FakeVllm(b"data: {not json\n\ndata: [DONE]\n\n"))
    assert not res.success and res.error_type == "bad_chunk"


def test_hung_server_fails_within_the_request_timeout():
    start = time.monotonic()
    res = _run(FakeVllm(hang_s=5.0), settings=ClientSettings(connect_timeout_s=1.0, request_timeout_s=0.3))
    assert time.monotonic() - start < 4.0
    assert not res.success and res.error_type == "request_timeout" and res.http_status is None


def test_connection_refused_is_a_row():
    res = _run(FakeVllm(), url="http://127.0.0.1:9")
    assert not res.success and res.error_type == "connect_error"


def test_every_error_type_is_documented():
    for name in (
        "http_status",
        "connect_error",
        "request_timeout",
        "stream_truncated",
        "no_usage",
        "not_streamed",
        "stream_error",
        "bad_chunk",
    ):
        assert ERROR_TYPES[name]


def test_api_key_is_sent_as_bearer_and_never_kept():
    fake = FakeVllm(api_key="sk-test-123456")
    settings = ClientSettings(api_key="sk-test-123456")
    res = _run(fake, settings=settings)
    assert res.success and fake.auth_headers == ["Bearer sk-test-123456"]
    assert "sk-test" not in repr(settings) and "sk-test" not in repr(res)
    denied = _run(FakeVllm(api_key="sk-other-999999"), settings=settings)
    assert denied.error_type == "http_status" and denied.http_status == 401


def test_url_credentials_go_to_the_server_but_not_into_errors():
    async def go():
        fake = FakeVllm(status=500)
        async with serving(fake.server()) as (s, base):
            url = base.replace("http://", "http://alice:hunter2secret@") + "/?api_key=topsecret1"
            return await stream_chat(s, url, "m", ROW, "r"), fake

    res, fake = asyncio.run(go())
    assert res.error_type == "http_status"
    assert fake.auth_headers[0].startswith("Basic ")  # the credentials did reach the server
    assert "hunter2secret" not in (res.error_message or "") and "topsecret1" not in (res.error_message or "")


def test_payload_is_greedy_chat_with_forced_length():
    p = build_payload("m", ROW)
    assert p["messages"] == [{"role": "user", "content": "Repeat exactly"}]
    assert p["max_tokens"] == 12 and p["temperature"] == 0.0 and p["stream"] is True


def _event(content: str | None, completion_tokens=None, choices: bool = True) -> bytes:
    """One stream event as vLLM 0.32 writes it with continuous_usage_stats: a content
    delta and, when given, the running completion-token count in its usage."""
    chunk: dict = {"choices": [{"index": 0, "delta": {"content": content}}] if choices else []}
    if completion_tokens is not None:
        chunk["usage"] = {"prompt_tokens": 3, "completion_tokens": completion_tokens}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _final(completion_tokens: int = 8) -> bytes:
    return (
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d},'
        b'"metrics":{"speculative_decoding":{"num_spec_steps":2,"num_draft_tokens":8,'
        b'"num_accepted_draft_tokens":5}}}\n\ndata: [DONE]\n\n' % completion_tokens
    )


def test_per_chunk_usage_gives_the_running_token_count_of_every_content_chunk():
    sse = (
        _event("", 0)  # the role chunk: no content, not a chunk of its own
        + _event("a", 1)
        + _event("bcde", 5)  # a verify round: four tokens in one chunk
        + _event("", 6)  # a token that streamed no text yet (held back)
        + _event("fg", 8)
        + _final(8)
    )
    res = _run(FakeVllm(sse))
    assert res.success and res.output_tokens == 8 and res.prompt_tokens == 3
    assert res.chunk_tokens == [1, 5, 8] and len(res.chunk_offsets_ms) == 3
    assert res.output_text == "abcdefg"
    assert (res.spec_num_steps, res.spec_num_draft_tokens, res.spec_num_accepted_tokens) == (2, 8, 5)
    # the last usage block is still the one that decides: a non-integer total fails as before
    sse = _event("a", 1) + b'data: {"choices":[],"usage":{"completion_tokens":"1"}}\n\ndata: [DONE]\n\n'
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "no_usage" and res.chunk_tokens == [1]


@pytest.mark.parametrize(
    "sse",
    [
        GOOD_SSE,  # usage in the final chunk only
        _event("a", 1) + _event("b") + _event("c", 3) + _final(3),  # one content chunk without a count
        _event("a", 2) + _event("b", 1) + _final(2),  # a count that went down
        _event("a", 1) + _event("b", "2") + _final(2),  # a count that is not an integer
        _event("a", 1) + _event("b", 9) + _final(2),  # above the final usage's total
    ],
    ids=["final-only", "gap", "decreasing", "not-int", "above-total"],
)
def test_per_chunk_counts_are_all_or_nothing(sse):
    res = _run(FakeVllm(sse))
    assert res.success and res.error_type is None  # the final usage block decides, as before
    assert res.chunk_tokens == [] and len(res.chunk_offsets_ms) >= 2


def test_only_the_timed_request_asks_for_per_chunk_usage():
    assert build_payload("m", ROW)["stream_options"] == {"include_usage": True}
    assert build_payload("m", ROW, per_chunk_usage=True)["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
