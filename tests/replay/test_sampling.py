"""The sampling-mode pass (issue 6, item 8): what is sent (seeds, temperature,
logprobs), the sequence logprob, typed failures and the SampleCheck table,
against a fake server replaying a recorded vLLM stream."""

from __future__ import annotations

import asyncio
import json

import pytest

from specdec.replay.passes.sampling import (
    DEFAULT_SEEDS,
    derive_seeds,
    sample_one,
    sample_pass,
    sample_table,
    sampled_rows,
)
from specdec.schemas.records import SampleCheck, TrafficRow
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving

ROW = TrafficRow(prompt_id="p1", category="chat", prompt="Tell me a story", max_tokens=16, temperature=0.8)


def _event(entries: list[dict]) -> bytes:
    choice = {"index": 0, "delta": {"content": "x"}, "logprobs": {"content": entries}}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def _entry(tid: int, lp: float, top: list[tuple[int, float]] = ()) -> dict:
    return {
        "token": f"token_id:{tid}",
        "logprob": lp,
        "top_logprobs": [{"token": f"token_id:{t}", "logprob": v} for t, v in top],
    }


def _stream(*events: bytes, completion_tokens: int) -> bytes:
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens}}
    return b"".join(events) + b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"


# three sampled tokens in two events (speculation), the second not the most likely one;
# the end-of-sequence id 2 is sampled at position 2
SAMPLED = _stream(
    _event([_entry(7, -0.25)]), _event([_entry(9, -1.5, [(4, -0.5)]), _entry(2, -2.0)]), completion_tokens=3
)


def _run(fake: FakeVllm, coro_fn):
    async def go():
        async with serving(fake.server()) as (s, base):
            return await coro_fn(s, base)

    return asyncio.run(go())


def test_seeds_are_derived_deterministically_and_bases_give_unrelated_lists():
    assert derive_seeds(3, 5) == derive_seeds(3, 5) and len(set(derive_seeds(3, 50))) == 50
    assert derive_seeds(3, 2) == derive_seeds(3, 5)[:2]  # a longer list extends a shorter one
    assert not set(derive_seeds(1, 50)) & set(derive_seeds(2, 50))
    assert all(0 <= s < 2**31 for s in derive_seeds(0, 100))
    assert DEFAULT_SEEDS == derive_seeds(0, 16)


def test_sequence_logprob_sums_the_emitted_tokens_and_natural_end_is_the_first_sampled_eos():
    fake = FakeVllm(SAMPLED)
    res = _run(fake, lambda s, base: sample_one(s, base, "m", ROW, "rid", 3, 1234, 0.8, eos_token_ids=frozenset({2})))
    assert res.stream.success and res.token_ids == [7, 9, 2]
    assert res.emitted_logprobs == [-0.25, -1.5, -2.0]
    assert res.sequence_logprob == -3.75  # the emitted tokens' logprobs, not the top-1 (-0.5) at position 1
    assert res.natural_end_position == 2
    assert (res.sample_index, res.seed, res.temperature) == (3, 1234, 0.8)


def test_the_recorded_vllm_stream_sums_every_position(fixtures):
    raw = (fixtures / "vllm_chat_stream_logprobs.sse").read_bytes()
    expected = sum(
        e["logprob"]
        for line in raw.decode().splitlines()
        if line.startswith("data: {")
        for c in json.loads(line[6:])["choices"]
        if c.get("logprobs")
        for e in c["logprobs"]["content"]
    )
    res = _run(
        FakeVllm(raw), lambda s, base: sample_one(s, base, "m", ROW, "rid", 0, 1, 1.0, eos_token_ids=frozenset({2}))
    )
    assert res.stream.success and len(res.emitted_logprobs) == 16
    assert res.sequence_logprob == pytest.approx(expected) and expected < -2.0
    assert res.natural_end_position == 6


def test_pass_sends_every_sampled_prompt_once_per_seed_with_logprobs_at_level_concurrency():
    fake = FakeVllm(SAMPLED, delay_s=0.01)
    rows = [
        ROW,
        ROW.model_copy(update={"prompt_id": "g", "temperature": 0.0}),  # greedy: not sampled
        ROW.model_copy(update={"prompt_id": "p2", "category": "code", "temperature": 1.0, "max_tokens": 8}),
        ROW,
    ]  # a repeated prompt is sampled once per seed
    assert [r.prompt_id for r in sampled_rows(rows)] == ["p1", "p2"]
    results = _run(
        fake,
        lambda s, base: sample_pass(
            s, base, "m", rows, 2, lambda i: f"sd.t.baseline.c2.{i:05d}.sample", None, [11, 22, 33], frozenset({2})
        ),
    )
    assert len(results) == 6 and fake.max_in_flight == 2
    sent = sorted((b["max_tokens"], b["seed"], b["temperature"]) for b in fake.bodies)
    assert sent == [(8, 11, 1.0), (8, 22, 1.0), (8, 33, 1.0), (16, 11, 0.8), (16, 22, 0.8), (16, 33, 0.8)]
    for body in fake.bodies:
        assert body["logprobs"] is True and body["top_logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
        assert body["ignore_eos"] is True and body["stream"] is True
    assert sorted(fake.request_ids) == [f"sd.t.baseline.c2.{i:05d}.sample" for i in range(6)]
    # seed by seed: the first two requests are both prompts with the first seed
    assert {(b["seed"], b["max_tokens"]) for b in fake.bodies[:2]} == {(11, 16), (11, 8)}

    table = sample_table("t", "baseline", 2, results)
    assert table.schema.names == list(SampleCheck.model_fields)
    got = sorted(table.to_pylist(), key=lambda r: (r["prompt_id"], r["sample_index"]))
    assert [(r["prompt_id"], r["sample_index"], r["seed"]) for r in got] == [
        ("p1", 0, 11),
        ("p1", 1, 22),
        ("p1", 2, 33),
        ("p2", 0, 11),
        ("p2", 1, 22),
        ("p2", 2, 33),
    ]
    p2 = got[3]
    assert (p2["arm"], p2["level"], p2["category"], p2["temperature"], p2["max_tokens"]) == (
        "baseline",
        2,
        "code",
        1.0,
        8,
    )
    assert p2["success"] and p2["error_type"] is None and p2["output_tokens"] == 3
    assert p2["sequence_logprob"] == -3.75 and p2["natural_end_position"] == 2 and p2["eos_token_ids"] == [2]
    assert p2["top_p"] is None
    for r in got:
        SampleCheck.model_validate(r)


def test_temperature_override_replaces_every_rows_temperature():
    fake = FakeVllm(SAMPLED)
    rows = [ROW, ROW.model_copy(update={"prompt_id": "p2", "temperature": 1.0})]
    results = _run(fake, lambda s, base: sample_pass(s, base, "m", rows, 1, str, None, [5], temperature_override=0.7))
    assert [b["temperature"] for b in fake.bodies] == [0.7, 0.7]
    assert {r.temperature for _, r in results} == {0.7}
    assert set(sample_table("t", "speculative", 1, results).column("temperature").to_pylist()) == {0.7}


@pytest.mark.parametrize(
    "fake, error_type",
    [
        (FakeVllm(b"", status=500), "http_status"),
        (FakeVllm(GOOD_SSE), "bad_logprobs"),  # a server that ignored logprobs
        (FakeVllm(SAMPLED.replace(b"data: [DONE]\n\n", b"")), "stream_truncated"),
    ],
)
def test_failures_are_typed_rows_without_a_sequence_logprob(fake, error_type):
    results = _run(fake, lambda s, base: sample_pass(s, base, "m", [ROW], 1, str, None, [1, 2]))
    rows = sample_table("t", "speculative", 1, results).to_pylist()
    assert len(rows) == 2
    for r in rows:
        assert r["success"] is False and r["error_type"] == error_type
        assert r["sequence_logprob"] is None and r["natural_end_position"] is None and r["eos_token_ids"] is None


def test_no_sampled_rows_send_nothing():
    fake = FakeVllm(SAMPLED)
    greedy = ROW.model_copy(update={"temperature": 0.0})
    assert _run(fake, lambda s, base: sample_pass(s, base, "m", [greedy], 4, str, None, DEFAULT_SEEDS)) == []
    assert fake.bodies == []
