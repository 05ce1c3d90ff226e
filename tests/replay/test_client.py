import asyncio

from specdec.replay.client import build_payload, stream_chat
from specdec.schemas.records import TrafficRow
from tests.replay.fake_server import FakeVllm, serving

ROW = TrafficRow(prompt_id="p1", category="code", prompt="Repeat exactly", max_tokens=12)


def _run(fake: FakeVllm, url: str | None = None):
    async def go():
        async with serving(fake.server()) as (s, base):
            return await stream_chat(s, url or base, "m", ROW, "sd.t.speculative.c1.00000")

    return asyncio.run(go())


def test_records_recorded_vllm_stream(fixtures):
    # a real vLLM 0.32 stream: 12 tokens, ngram k=4, per-request spec metrics in the usage chunk
    sse = (fixtures / "vllm_chat_stream_spec.sse").read_bytes()
    fake = FakeVllm(sse, delay_s=0.002)
    res = _run(fake)
    assert res.success and res.error_type is None
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
    body = fake.bodies[0]
    assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True


def test_http_error_becomes_a_row_not_an_exception():
    res = _run(FakeVllm(b"", status=500))
    assert not res.success and res.error_type == "HTTP500" and "engine is sad" in res.error_message


def test_stream_error_event_is_recorded():
    sse = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"error": {"message": "EngineDeadError"}}\n\n'
    res = _run(FakeVllm(sse))
    assert not res.success and res.error_type == "StreamError" and "EngineDeadError" in res.error_message
    assert res.output_text == "hi"  # what arrived before the error is kept


def test_connection_refused_is_a_row():
    res = _run(FakeVllm(b""), url="http://127.0.0.1:9")
    assert not res.success and res.error_type is not None


def test_payload_is_greedy_chat_with_forced_length():
    p = build_payload("m", ROW)
    assert p["messages"] == [{"role": "user", "content": "Repeat exactly"}]
    assert p["max_tokens"] == 12 and p["temperature"] == 0.0 and p["stream"] is True
