"""stg_stability and the stability mart over a hand-made stability run folder
(a manifest of kind stability and stability.parquet, no requests.parquet).

Rows (fault, probe, outcome, sent, failed, error types, healthy):
    empty_prompt  0  ok        1  1  [http_400]            yes
    odd_unicode   0  ok        1  0  []                    yes
    odd_unicode   1  degraded  1  1  [http_500]            yes   <- worst: its detail is the fault's
    odd_unicode   2  degraded  1  1  [http_400]            yes
    soak          0  ok        40 2  [request_timeout]     yes   RSS 100 -> 120 MiB, max 121, +10 MiB/min
    kill_restart  0  skipped   0  0  []                    yes
    greedy        0  ok        3  0  []                    yes
    greedy        1  failed    3  0  []                    no
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.experiments.stability import fault_table
from specdec.runfolder import write_manifest
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import ArmConfig, RunManifest, StabilityResult
from tests.support.duck import rows


def _row(fault, i, outcome, sent, failed, errs, healthy=True, w=0, expected="completes", **rss):
    return StabilityResult(
        run_id="s",
        fault=fault,
        probe_index=i,
        wall_start_ns=w,
        duration_ms=250.0,
        requests_sent=sent,
        requests_failed=failed,
        error_types=errs,
        expected=expected,
        outcome=outcome,
        server_healthy_after=healthy,
        detail=f"{fault} #{i}",
        **rss,
    )


ROWS = [
    _row("empty_prompt", 0, "ok", 1, 1, ["http_400"], w=1, expected="HTTP 400 or completes"),
    _row("odd_unicode", 0, "ok", 1, 0, [], w=2),
    _row("odd_unicode", 1, "degraded", 1, 1, ["http_500"], w=3),
    _row("odd_unicode", 2, "degraded", 1, 1, ["http_400"], w=4, expected="HTTP 400 or completes"),
    _row(
        "soak",
        0,
        "ok",
        40,
        2,
        ["request_timeout"],
        w=5,
        rss_mb=119.0,
        rss_samples=3,
        rss_first_mb=100.0,
        rss_last_mb=120.0,
        rss_max_mb=121.0,
        rss_slope_mb_per_min=10.0,
    ),
    _row("kill_restart", 0, "skipped", 0, 0, [], w=6),
    _row("greedy_recheck", 0, "ok", 3, 0, [], w=7),
    _row("greedy_recheck", 1, "failed", 3, 0, [], healthy=False, w=8),
]


@pytest.fixture
def con(tmp_path):
    manifest = RunManifest(
        kind="stability",
        run_id="s",
        created_wall=dt.datetime(2025, 1, 1).isoformat(),
        specdec_version="0",
        engine={"name": "external"},
        model="m",
        dtype="unknown",
        arms=[ArmConfig(name="baseline", speculative_config=None, server_args=[], endpoint="http://127.0.0.1:1")],
        arm_difference=[],
        sampling={},
        traffic={},
        levels=[2],
        warmup_requests=0,
        host={},
        finished=True,
    )
    write_manifest(tmp_path, manifest)
    write_parquet_atomic(table_from_records(StabilityResult, ROWS), tmp_path / "stability.parquet")
    c = duckdb.connect(str(build(tmp_path)), read_only=True)
    yield c
    c.close()


def test_stg_stability_columns_are_the_record_fields(con):
    cols = [r["column_name"] for r in rows(con, "describe stg_stability")]
    assert cols == list(StabilityResult.model_fields)
    assert con.execute("select count(*) from stg_stability").fetchone() == (len(ROWS),)


def test_one_row_per_fault_in_run_order_with_worst_outcome(con):
    got = {r["fault"]: r for r in rows(con, "select * from stability")}
    assert list(got) == ["empty_prompt", "odd_unicode", "soak", "kill_restart", "greedy_recheck"]
    u = got["odd_unicode"]
    assert (u["probes"], u["requests_sent"], u["requests_failed"]) == (3, 3, 2)
    assert u["error_rate"] == pytest.approx(2 / 3)
    assert u["error_types"] == ["http_400", "http_500"]
    assert u["outcome"] == "degraded" and u["detail"] == "odd_unicode #1"  # first of the worst
    assert u["expected"] == "HTTP 400 or completes | completes"
    assert u["server_healthy_after"] is True and u["duration_s"] == pytest.approx(0.75)
    assert got["kill_restart"]["outcome"] == "skipped" and got["kill_restart"]["error_rate"] is None
    g = got["greedy_recheck"]
    assert g["outcome"] == "failed" and g["server_healthy_after"] is False and g["detail"] == "greedy_recheck #1"


def test_soak_rss_trend_columns_and_null_elsewhere(con):
    got = {r["fault"]: r for r in rows(con, "select * from stability")}
    s = got["soak"]
    assert (s["rss_first_mb"], s["rss_last_mb"], s["rss_max_mb"], s["rss_samples"], s["rss_slope_mb_per_min"]) == (
        100.0,
        120.0,
        121.0,
        3,
        10.0,
    )
    assert s["error_rate"] == pytest.approx(2 / 40)
    assert got["empty_prompt"]["rss_slope_mb_per_min"] is None and got["empty_prompt"]["rss_samples"] is None


def test_the_terminal_table_follows_the_same_rule_as_the_mart(con):
    mart = [
        (r["fault"], r["outcome"], r["requests_sent"], r["requests_failed"], r["server_healthy_after"], r["detail"])
        for r in rows(con, "select * from stability")
    ]
    py = [
        (f["fault"], f["outcome"], f["requests_sent"], f["requests_failed"], f["server_healthy_after"], f["detail"])
        for f in fault_table(ROWS)
    ]
    assert py == mart
