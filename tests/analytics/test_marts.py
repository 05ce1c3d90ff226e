"""Each mart against numbers worked out by hand from the fixture (see conftest)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from pytest import approx

from specdec.analytics.build import build
from specdec.errors import InputFileError
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import SCHEMA_VERSION, MetricSnapshot
from tests.support.synthetic_run import make_rounds, write_run


def by(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r for r in rows}


def test_acceptance(query):
    got = by(query("select * from acceptance"), "arm", "category")
    cols = [
        "verify_rounds",
        "tokens_proposed",
        "tokens_accepted",
        "mean_acceptance_length",
        "acceptance_rate",
        "decode_steps_no_draft",
        "rounds_all_rejected",
    ]
    pick = lambda r: [r[c] for c in cols]  # noqa: E731
    # speculative code, 2 levels x (4,4) (4,2) (4,0) + one k=0 decode row:
    #   rounds 2*3 = 6, proposed 2*12 = 24, accepted 2*6 = 12
    #   length 1 + 12/6 = 3.0, rate 12/24 = 0.5, no-draft 2*1 = 2, all-rejected 2*1 = 2
    assert pick(got["speculative", "code"]) == [6, 24, 12, 3.0, 0.5, 2, 2]
    # speculative chat, 2 levels x (4,1) (4,0):
    #   rounds 4, proposed 16, accepted 2; length 1 + 2/4 = 1.5, rate 2/16 = 0.125
    assert pick(got["speculative", "chat"]) == [4, 16, 2, 1.5, 0.125, 0, 2]
    # baseline: no verify rounds -> NULL ratios; 2 levels x 2 decode rows with k = 0
    for cat in ("code", "chat"):
        assert pick(got["baseline", cat]) == [0, 0, 0, None, None, 4, 0]


def test_warmup_rows_are_excluded(query):
    warm = query("select request_id from stg_rounds where request_id like '%warmup'")
    assert warm == [{"request_id": "sd.t.speculative.c0.00000.warmup"}]
    # 29 captured rows = 1 warm-up + 28 attributed: speculative 2 levels * (5 code + 3 chat)
    # = 16, baseline 4 requests * 3 = 12 (each count includes the prefill row)
    assert query("select count(*) n from stg_rounds") == [{"n": 29}]
    assert query("select count(*) n from int_rounds_attributed") == [{"n": 28}]
    assert query("select count(*) n from int_rounds_attributed where request_id like '%warmup'") == [{"n": 0}]


def test_speedup(query):
    got = {k: v["speedup"] for k, v in by(query("select * from speedup"), "category", "level").items()}
    assert got == {
        ("code", 1): approx(125 / 50),  # 100 tok / 0.8 s over 100 tok / 2.0 s = 2.5
        ("code", 2): approx(125 / 50),
        ("chat", 1): approx(100 / 50),  # 100 tok / 1.0 s over 100 tok / 2.0 s = 2.0
        ("chat", 2): approx(100 / 50),
        # level tokens/s: c1 spec 200/2.0 s = 100, base 200/4.0 s = 50 -> 2.0
        ("(system)", 1): approx(2.0),
        # c2 spec 200/1.0 s = 200, base 200/2.5 s = 80 -> 2.5
        ("(system)", 2): approx(2.5),
    }


def test_latency_single_request_group(query):
    (r,) = query("select * from latency where arm = 'speculative' and category = 'code' and level = 1")
    assert (r["requests_ok"], r["requests_failed"]) == (1, 0)
    # one request: every percentile is its own value, ttft 8 ms
    assert [r["ttft_ms_p50"], r["ttft_ms_p95"], r["ttft_ms_p99"]] == [8.0, 8.0, 8.0]
    # tpot (800 - 8) / (100 - 1) = 8 ms
    assert [r["tpot_ms_p50"], r["tpot_ms_p95"], r["tpot_ms_p99"]] == [8.0, 8.0, 8.0]
    # chunks at 8, 400, 800 ms -> gaps 392, 400; median 396
    assert r["itl_chunk_gap_ms_p50"] == 396.0
    assert r["output_tokens_per_s_mean"] == approx(125.0)  # 100 / 0.8 s


def test_throughput(query):
    got = by(query("select * from throughput"), "arm", "level")
    # level_seconds = last end - first send
    assert got["baseline", 1]["level_seconds"] == 4.0  # chat sent 2.0 s, ends 4.0 s
    assert got["baseline", 2]["level_seconds"] == 2.5  # chat sent 0.5 s, ends 2.5 s
    assert got["speculative", 1]["level_seconds"] == 2.0  # chat sent 1.0 s, ends 2.0 s
    assert got["speculative", 2]["level_seconds"] == 1.0  # both sent 0, chat ends 1.0 s
    assert got["baseline", 2]["output_tokens_per_s"] == approx(80.0)  # 200 / 2.5
    assert got["speculative", 2]["requests_per_s"] == approx(2.0)  # 2 / 1.0


RECON = [
    "captured_rounds",
    "engine_rounds",
    "diff_rounds",
    "captured_proposed",
    "engine_proposed",
    "diff_proposed",
    "captured_accepted",
    "engine_accepted",
    "diff_accepted",
    "engine_counters_present",
]


def test_reconciliation_exact(query):
    got = by(query("select * from reconciliation"), "arm", "level")
    for conc in (1, 2):
        # per level: rounds 3 + 2 = 5, proposed 5 * 4 = 20, accepted (4+2+0) + (1+0) = 7
        assert [got["speculative", conc][c] for c in RECON] == [5, 5, 0, 20, 20, 0, 7, 7, 0, True]
        # baseline: nothing captured, counters NULL -> diffs 0 - coalesce(NULL, 0) = 0
        assert [got["baseline", conc][c] for c in RECON] == [0, None, 0, 0, None, 0, 0, None, 0, False]


def test_reconciliation_detects_a_counter_mismatch(run_dir, query):
    path = run_dir / "engine_counters.parquet"
    snaps = [MetricSnapshot(**r) for r in pq.read_table(path).to_pylist()]
    for s in snaps:
        if (s.arm, s.level, s.position) == ("speculative", 2, "after"):
            s.spec_num_accepted_tokens += 3
    write_parquet_atomic(table_from_records(MetricSnapshot, snaps), path)
    diffs = {
        (r["arm"], r["level"]): (r["diff_rounds"], r["diff_proposed"], r["diff_accepted"])
        for r in query("select * from reconciliation")
    }
    # engine accepted 7 + 3 = 10 -> diff 7 - 10 = -3, for that arm and level only
    assert diffs == {
        ("baseline", 1): (0, 0, 0),
        ("baseline", 2): (0, 0, 0),
        ("speculative", 1): (0, 0, 0),
        ("speculative", 2): (0, 0, -3),
    }


def test_reconciliation_flags_runs_without_capture(run_dir, query):
    # an external server without the plugin: no rounds file at all
    (run_dir / "rounds.parquet").unlink()
    rows = query("select arm, level, capture_present, diff_rounds from reconciliation")
    assert {r["capture_present"] for r in rows} == {False}
    # the speculative diffs are then -5 rounds per level: meaningless, hence the flag
    assert sorted(r["diff_rounds"] for r in rows if r["arm"] == "speculative") == [-5, -5]


def test_output_equality(query):
    got = {
        (r["category"], r["level"]): (r["pairs"], r["identical"], r["identical_share"])
        for r in query("select * from output_equality")
    }
    # one pair per category and level; only chat at c2 differs ("hello" vs "hello!")
    assert got == {
        ("chat", 1): (1, 1, 1.0),
        ("chat", 2): (1, 0, 0.0),
        ("code", 1): (1, 1, 1.0),
        ("code", 2): (1, 1, 1.0),
    }


def test_build_names_a_file_missing_a_column(run_dir):
    path = run_dir / "requests.parquet"
    table = (
        pq.read_table(path)
        .drop_columns(["ttft_ms"])
        .replace_schema_metadata({b"schema_version": SCHEMA_VERSION.encode()})
    )
    pq.write_table(table, path)
    with pytest.raises(InputFileError, match="missing column") as exc:
        build(run_dir)
    assert str(path) in str(exc.value) and "ttft_ms" in str(exc.value)


def test_build_names_a_file_with_the_wrong_schema_version(run_dir):
    path = run_dir / "requests.parquet"
    pq.write_table(pq.read_table(path).replace_schema_metadata({b"schema_version": b"1"}), path)
    with pytest.raises(InputFileError, match="schema_version is '1'") as exc:
        build(run_dir)
    assert str(path) in str(exc.value)


def test_step_timing_keeps_apart_two_engines_that_reused_a_pid(tmp_path):
    """A restarted engine under the same PID restarts its step counter: its steps
    must not merge with the first incarnation's (grouped by process_token)."""
    import duckdb

    rounds = make_rounds()
    base = [r for r in rounds if r.pid == 1]  # baseline rows: 12 rows, 8 decode steps
    # a second incarnation: same pid, same step numbers, another process token
    again = [r.model_copy(update={"process_token": "1-restarted"}) for r in base]
    run_dir = write_run(tmp_path, rounds=[r for r in rounds if r.pid != 1] + base + again)
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    steps = dict(con.execute("select level, steps from step_timing where arm = 'baseline'").fetchall())
    assert steps == {1: 8, 2: 8}  # 2 requests x 2 decode rows x 2 incarnations per level
