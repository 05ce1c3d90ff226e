"""Mart speedup_by_input_length on hand-checkable rows."""

from __future__ import annotations

import math

from pytest import approx

from tests.support.synthetic_run import repeated_counters, repeated_requests, write_run

PROMPT_TOKENS = {"code-0": 100, "code-1": 300, "chat-0": 2000, "chat-1": 255}
SPEC = {"code-0": 1000.0, "code-1": 500.0, "chat-0": 1600.0, "chat-1": 250.0}


def test_buckets_speedup_and_latency(tmp_path, query):
    reqs = repeated_requests(lambda arm, pid, level, r: 2000.0 if arm == "baseline" else SPEC[pid], levels=(1,))
    reqs = [q.model_copy(update={"prompt_tokens": PROMPT_TOKENS[q.prompt_id]}) for q in reqs]
    write_run(tmp_path, requests=reqs, rounds=[], counters=repeated_counters(levels=(1,)))
    got = {r["input_bucket"]: r for r in query("select * from speedup_by_input_length")}
    assert list(got) == ["short", "medium", "long"]
    short, medium, long_ = got["short"], got["medium"], got["long"]
    # short: code-0 (2x) and chat-1 (8x), 2 repeats each: geometric mean 4
    assert (short["pairs"], short["prompts"], short["speedup"]) == (4, 2, approx(4.0))
    assert (short["input_low"], short["input_high"], medium["input_high"], long_["input_high"]) == (0, 256, 1024, None)
    assert medium["speedup"] == approx(4.0) and long_["speedup"] == approx(2000 / 1600)
    assert long_["baseline_e2e_ms_p50"] == approx(2000.0) and long_["speculative_e2e_ms_p50"] == approx(1600.0)
    # TTFT is e2e / 100 in these rows: speculative short = 10 and 2.5 ms -> p50 6.25
    assert short["speculative_ttft_ms_p50"] == approx(6.25) and short["requests"] == 8
    assert math.isclose(short["baseline_ttft_ms_p95"], 20.0)
