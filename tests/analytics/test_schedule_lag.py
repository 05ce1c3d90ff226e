"""The schedule_lag mart on hand-checkable send times.

From the synthetic run (conftest): two requests per arm and level. Level 1 is
made an open-loop Poisson level at 0.5 requests/s, level 2 stays closed loop:

    arm          level  intended (ms)  actual (ms)   lag (ms)  session_wait_ms
    baseline     1      0, 2000        1, 2004       1, 4      None, 0
    speculative  1      0, 2000        0, 2010       0, 10     None, 30   (held)
    both         2      -              0, 500        -         -

    baseline c1:    p50 = 2.5, p99 = 1 + 0.99 * 3 = 3.97, max 4;
                    offered 1 / 2.0 s = 0.5 /s, achieved 1 / 2.003 s
    speculative c1: p50 = 5, p99 = 0.99 * 10 = 9.9, max 10, one request held;
                    achieved 1 / 2.010 s
    c2 (closed):    lag, held and offered rate NULL; achieved 1 / 0.5 s = 2 /s
"""

from __future__ import annotations

import pytest

from specdec.analytics.build import build
from tests.support.duck import rows
from tests.support.synthetic_run import make_requests, write_run

SENDS = {
    ("baseline", 1): [(0.0, 1.0, None), (2000.0, 2004.0, 0.0)],
    ("speculative", 1): [(0.0, 0.0, None), (2000.0, 2010.0, 30.0)],
    ("baseline", 2): [(None, 0.0, None), (None, 500.0, None)],
    ("speculative", 2): [(None, 0.0, None), (None, 500.0, None)],
}


def _requests():
    out, seen = [], {}
    for req in make_requests():
        key = (req.arm, req.level)
        n = seen[key] = seen.get(key, -1) + 1
        intended, actual, wait = SENDS[key][n]
        out.append(
            req.model_copy(
                update=dict(
                    load_mode="poisson" if req.level == 1 else "closed",
                    level_value=0.5 if req.level == 1 else 2.0,
                    intended_send_ms=intended,
                    actual_send_ms=actual,
                    session_wait_ms=wait,
                    schedule_lag_ms=None if intended is None else actual - intended,
                )
            )
        )
    return out


def test_schedule_lag_per_arm_and_level(tmp_path):
    got = {
        (r["arm"], r["level"]): r
        for r in rows(build(write_run(tmp_path, requests=_requests())), "select * from schedule_lag")
    }
    b1, s1, b2 = got[("baseline", 1)], got[("speculative", 1)], got[("baseline", 2)]
    assert (b1["load_mode"], b1["level_value"], b1["repeats"], b1["requests"], b1["requests_held"]) == (
        "poisson",
        0.5,
        1,
        2,
        0,
    )
    assert (b1["lag_ms_p50"], b1["lag_ms_p99"], b1["lag_ms_max"]) == pytest.approx((2.5, 3.97, 4.0))
    assert b1["offered_rate_per_s"] == pytest.approx(0.5)
    assert b1["achieved_rate_per_s"] == pytest.approx(1 / 2.003)
    assert (s1["lag_ms_p50"], s1["lag_ms_p99"], s1["lag_ms_max"], s1["requests_held"]) == pytest.approx(
        (5.0, 9.9, 10.0, 1)
    )
    assert s1["achieved_rate_per_s"] == pytest.approx(1 / 2.010)
    assert b2["load_mode"] == "closed" and b2["level_value"] == 2.0
    assert [
        b2[c]
        for c in ("lag_ms_p50", "lag_ms_p99", "lag_ms_max", "requests_held", "intended_span_s", "offered_rate_per_s")
    ] == [None] * 6
    assert b2["achieved_rate_per_s"] == pytest.approx(2.0)
