"""Failures per level: counted and typed in level_health, and no speedup or
lossless figure from a level that failed in either arm (see conftest).

The run: the fixture with baseline c2 chat failed (HTTP 500), so baseline c2
has 1 of 2 requests failed -> error_rate 0.5 > max_error_rate 0.05 -> failed.
"""

from __future__ import annotations

import pytest
from pytest import approx

from tests.support.synthetic_run import failed, make_manifest, make_requests, write_run

BASE_C2_CHAT = ("baseline", 2, "chat")


def requests_with_failure():
    return [failed(r) if (r.arm, r.level, r.category) == BASE_C2_CHAT else r for r in make_requests()]


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path, requests=requests_with_failure())


def by(rows, *keys):
    return {tuple(r[k] for k in keys): r for r in rows}


LEVEL = [
    "requests",
    "requests_ok",
    "requests_failed",
    "error_rate",
    "error_types",
    "http_statuses",
    "error_example",
    "max_error_rate",
    "level_failed",
]


def test_level_health_counts_and_judges_each_level(query):
    got = {k: [r[c] for c in LEVEL] for k, r in by(query("select * from level_health"), "arm", "level").items()}
    assert got["baseline", 2] == [
        2,
        1,
        1,
        0.5,
        "http_status: 1",
        "500: 1",
        "HTTP 500: Internal Server Error",
        0.05,
        True,
    ]
    for key in (("baseline", 1), ("speculative", 1), ("speculative", 2)):
        assert got[key] == [2, 2, 0, 0.0, None, None, None, 0.05, False]


def test_speedup_keeps_the_failed_level_row_without_a_figure(query):
    got = {
        k: (r["speedup"], r["excluded_reason"])
        for k, r in by(query("select * from speedup"), "category", "level").items()
    }
    reason = "baseline level failed (error rate 0.500 > max 0.050)"
    assert got == {
        ("code", 1): (approx(2.5), None),
        ("chat", 1): (approx(2.0), None),
        ("(system)", 1): (approx(2.0), None),
        ("code", 2): (None, reason),
        ("chat", 2): (None, reason),
        ("(system)", 2): (None, reason),
    }


def test_output_equality_computes_nothing_from_a_failed_level(query):
    got = {
        k: (r["pairs"], r["identical"], r["identical_share"], r["excluded_reason"])
        for k, r in by(query("select * from output_equality"), "category", "level").items()
    }
    reason = "baseline level failed (error rate 0.500 > max 0.050)"
    assert got == {
        ("chat", 1): (1, 1, 1.0, None),
        ("code", 1): (1, 1, 1.0, None),
        ("chat", 2): (None, None, None, reason),
        ("code", 2): (None, None, None, reason),
    }


def test_latency_and_throughput_use_successes_and_show_failures(query):
    lat = by(query("select * from latency"), "arm", "category", "level")
    chat = lat["baseline", "chat", 2]
    assert (chat["requests_ok"], chat["requests_failed"], chat["ttft_ms_p50"]) == (0, 1, None)
    thr = by(query("select * from throughput"), "arm", "level")["baseline", 2]
    # only the code request (sent at 0, 2 s long) succeeded: 100 tokens / 2.0 s
    assert (thr["requests_ok"], thr["requests_failed"], thr["level_seconds"]) == (1, 1, 2.0)
    assert thr["output_tokens_per_s"] == approx(50.0)


def test_a_looser_error_budget_lets_the_level_count(tmp_path, query):
    write_run(tmp_path, requests=requests_with_failure(), manifest=make_manifest(max_error_rate=0.6))
    health = by(query("select * from level_health"), "arm", "level")["baseline", 2]
    assert (health["error_rate"], health["max_error_rate"], health["level_failed"]) == (0.5, 0.6, False)
    got = {
        k: (r["speedup"], r["excluded_reason"])
        for k, r in by(query("select * from speedup"), "category", "level").items()
    }
    assert got["code", 2] == (approx(2.5), None)
    # no successful baseline chat request at c2: nothing to divide by
    assert got["chat", 2] == (None, "no successful baseline request in this group")
    # level: spec 200 tokens / 1.0 s over baseline 100 tokens / 2.0 s
    assert got["(system)", 2] == (approx(4.0), None)
    eq = by(query("select * from output_equality"), "category", "level")
    assert [eq["chat", 2][c] for c in ("pairs", "identical", "identical_share", "excluded_reason")] == [
        0,
        0,
        None,
        None,
    ]


def test_a_level_one_arm_never_ran_stays_with_a_reason(tmp_path, query):
    reqs = [r for r in make_requests() if (r.arm, r.level) != ("speculative", 2)]
    write_run(tmp_path, requests=reqs, manifest=make_manifest(finished=False))
    got = {
        k: (r["baseline_tokens_per_s"], r["speedup"], r["excluded_reason"])
        for k, r in by(query("select * from speedup"), "category", "level").items()
    }
    reason = "speculative arm has no requests at this level"
    assert got["code", 2] == (approx(50.0), None, reason)
    assert got["(system)", 2] == (approx(80.0), None, reason)
    assert got["code", 1][1] == approx(2.5)
