"""Mart capacity_under_slo: the highest measured concurrency each arm sustains under an
SLO, on hand-checkable rows (conftest's requests have TTFT = TPOT = e2e / 100)."""

from __future__ import annotations

import duckdb
from pytest import approx

from specdec.analytics.build import build
from specdec.analytics.settings import Slo
from tests.support.duck import rows
from tests.support.synthetic_run import failed, repeated_counters, repeated_requests, write_run

LEVELS = (1, 2, 4, 8)
E2E = {
    "baseline": {1: 5000, 2: 8000, 4: 12000, 8: 20000},  # TPOT 50, 80, 120, 200 ms
    "speculative": {1: 2000, 2: 4000, 4: 9000, 8: 15000},
}  # TPOT 20, 40, 90, 150 ms


def capacity(run_dir, slo=None) -> dict[str, dict]:
    return {row["arm"]: row for row in rows(build(run_dir, slo=slo), "select * from capacity_under_slo")}


def run(tmp_path, e2e=E2E, requests=None):
    reqs = requests or repeated_requests(lambda arm, pid, level, r: e2e[arm][level], levels=LEVELS)
    return write_run(tmp_path, requests=reqs, rounds=[], counters=repeated_counters(levels=LEVELS))


def test_the_two_arms_limits_differ(tmp_path):
    got = capacity(run(tmp_path))  # default SLO: p95 TTFT 2000 ms, p95 TPOT 100 ms
    base, spec = got["baseline"], got["speculative"]
    assert (base["max_level"], base["first_failing_level"], base["first_failing_reason"]) == (2, 4, "tpot")
    assert (spec["max_level"], spec["first_failing_level"], spec["first_failing_reason"]) == (4, 8, "tpot")
    assert base["tpot_ms_p95_at_max"] == approx(80.0) and spec["tpot_ms_p95_at_max"] == approx(90.0)
    assert base["capacity_ratio"] is None and spec["capacity_ratio"] == approx(2.0)
    assert not base["sustains_all_measured"] and base["levels_measured"] == 4
    assert (spec["slo_ttft_p95_ms"], spec["slo_tpot_p95_ms"], spec["slo_source"]) == (2000.0, 100.0, "default")


def test_the_slo_is_the_analysis_option(tmp_path):
    run_dir = run(tmp_path)
    loose = capacity(run_dir, Slo(ttft_p95_ms=2000, tpot_p95_ms=250, source="given"))
    assert all(r["sustains_all_measured"] and r["max_level"] == 8 for r in loose.values())
    assert loose["speculative"]["capacity_ratio"] == approx(1.0)  # both limits above the measured grid
    tight = capacity(run_dir, Slo(ttft_p95_ms=30, tpot_p95_ms=1000, source="given"))  # TTFT 50 ms at c1
    assert tight["baseline"]["max_level"] is None and tight["baseline"]["first_failing_reason"] == "ttft"
    assert tight["speculative"]["max_level"] == 1  # TTFT 20 then 40
    assert tight["speculative"]["capacity_ratio"] is None and tight["speculative"]["slo_source"] == "given"


def test_a_pass_above_a_failure_is_not_capacity_and_failed_levels_fail(tmp_path):
    e2e = {"baseline": dict(E2E["baseline"]), "speculative": {1: 2000, 2: 11000, 4: 9000, 8: 9000}}
    reqs = repeated_requests(lambda arm, pid, level, r: e2e[arm][level], levels=LEVELS)
    # baseline c1 loses every request of repeat 0: the level fails its error budget
    reqs = [failed(q) if (q.arm, q.level, q.repeat) == ("baseline", 1, 0) else q for q in reqs]
    got = capacity(run(tmp_path, requests=reqs))
    assert (got["speculative"]["max_level"], got["speculative"]["first_failing_level"]) == (1, 2)
    base = got["baseline"]
    assert (base["max_level"], base["first_failing_reason"]) == (None, "level failed (error budget)")
    assert got["speculative"]["capacity_ratio"] is None


def test_report_and_summary_show_capacity_and_the_slo(tmp_path):
    from specdec.analytics.report.data import load_report
    from specdec.analytics.report.summary import summary_text
    from specdec.analytics.report.write import render_html

    run_dir = run(tmp_path)
    con = duckdb.connect(str(build(run_dir, slo=Slo(ttft_p95_ms=2000, tpot_p95_ms=85, source="given"))), read_only=True)
    try:
        data = load_report(con)
    finally:
        con.close()
    summary = summary_text(data)
    at = summary.index("capacity under p95 TTFT <= 2000 ms and p95 TPOT <= 85 ms (given SLO")
    table = summary[at:].splitlines()[1:5]
    assert any(line.split()[:3] == ["baseline", "c2", "c4"] for line in table), table
    assert any(line.split()[:3] == ["speculative", "c2", "c4"] for line in table), table  # 90 ms at c4 > 85
    assert "Capacity under an SLO (p95 TTFT &lt;= 2000 ms, p95 TPOT &lt;= 85 ms; given)" in render_html(data)
