"""Mart acceptance_by_turn on the conftest run with sessions, and the columns a
file written before they existed lacks (schemas.arrow.ABSENT_AS_NULL), read as
NULL, one run at a time or mixed with newer files in one database."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
import pytest
from pytest import approx

from specdec.analytics.build import build
from specdec.analytics.input_validation import check_file, read_parquet_checked
from specdec.errors import InputFileError
from specdec.schemas.arrow import arrow_schema, table_from_records
from specdec.schemas.records import RequestResult
from tests.support.synthetic_run import make_manifest, make_requests, write_run


def with_sessions():
    """Speculative and baseline at c1: code is turn 0 and chat turn 1 of session s1;
    at c2 both requests are standalone."""
    out = []
    for r in make_requests():
        if r.level == 1:
            r = r.model_copy(update={"session_id": "s1", "turn_index": 0 if r.category == "code" else 1})
        out.append(r)
    return out


def test_per_turn_acceptance_and_throughput(tmp_path, query):
    write_run(tmp_path, requests=with_sessions())
    got = {(r["arm"], r["level"], r["category"], r["turn_index"]): r for r in query("select * from acceptance_by_turn")}
    assert sorted(got, key=str) == sorted(
        [
            (arm, c, cat, t)
            for arm in ("baseline", "speculative")
            for c, cat, t in ((1, "code", 0), (1, "chat", 1), (2, "code", None), (2, "chat", None))
        ],
        key=str,
    )
    t0 = got["speculative", 1, "code", 0]  # rounds (4,4) (4,2) (4,0): 6 of 12, 3 rounds, 9 emitted
    assert (t0["requests"], t0["sessions"], t0["verify_rounds"]) == (1, 1, 3)
    assert (t0["mean_acceptance_length"], t0["acceptance_rate"], t0["tokens_per_round"]) == (
        approx(3.0),
        approx(0.5),
        approx(3.0),
    )
    assert t0["stats_acceptance_rate"] == approx(0.5)  # the request's own stats agree
    assert (t0["output_tokens_per_s_mean"], t0["ttft_ms_p50"], t0["tpot_ms_p50"]) == (
        approx(125.0),
        approx(8.0),
        approx(8.0),
    )
    t1 = got["speculative", 1, "chat", 1]  # (4,1) (4,0): 1 of 8
    assert (t1["mean_acceptance_length"], t1["acceptance_rate"], t1["output_tokens_per_s_mean"]) == (
        approx(1.5),
        approx(0.125),
        approx(100.0),
    )
    alone = got["speculative", 2, "code", None]
    assert (alone["sessions"], alone["verify_rounds"], alone["acceptance_rate"]) == (0, 3, approx(0.5))
    base = got["baseline", 1, "code", 0]  # no drafts: no acceptance, only throughput
    assert (
        base["verify_rounds"],
        base["mean_acceptance_length"],
        base["acceptance_rate"],
        base["stats_acceptance_rate"],
        base["output_tokens_per_s_mean"],
    ) == (0, None, None, None, approx(50.0))


def _old_requests_file(run_dir):
    """requests.parquet as a specdec before session_id and turn_index wrote it."""
    path = run_dir / "requests.parquet"
    table = pq.read_table(path)
    old = table.drop_columns(["session_id", "turn_index"])
    old = old.replace_schema_metadata(table.schema.metadata)
    pq.write_table(old, path)
    return path


def test_a_file_without_the_new_columns_reads_them_as_null(tmp_path, query):
    write_run(tmp_path, requests=with_sessions())
    path = _old_requests_file(tmp_path)
    schema = arrow_schema(RequestResult)
    assert check_file(path, schema, full=True).rows == len(make_requests())
    table = read_parquet_checked(path, schema)
    assert table.schema.names == schema.names and table["turn_index"].null_count == table.num_rows
    got = query("select turn_index, count(*) as n, sum(requests) as req from acceptance_by_turn group by all")
    assert got == [{"turn_index": None, "n": 8, "req": 8}]


def test_old_and_new_files_in_one_database(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        d.mkdir()
        write_run(d, requests=with_sessions())
    _old_requests_file(old)
    # the second run: same rows under another run id
    import pyarrow as pa

    for name in ("requests.parquet", "rounds.parquet", "engine_counters.parquet"):
        t = pq.read_table(new / name)
        t = t.set_column(t.schema.get_field_index("run_id"), "run_id", pa.array(["u"] * t.num_rows))
        pq.write_table(t, new / name)
    from specdec.runfolder import write_manifest

    write_manifest(new, make_manifest(run_id="u"))
    con = duckdb.connect(str(build(tmp_path)), read_only=True)
    try:
        got = con.execute(
            "select run_id, count(*) filter (where turn_index is not null), count(*) "
            "from acceptance_by_turn group by run_id order by run_id"
        ).fetchall()
    finally:
        con.close()
    assert got == [("t", 0, 8), ("u", 4, 8)]


def test_a_missing_required_column_is_still_named(tmp_path):
    write_run(tmp_path)
    path = tmp_path / "requests.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["e2e_ms"]).replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(InputFileError) as err:
        check_file(path, arrow_schema(RequestResult))
    assert "missing column" in str(err.value) and "e2e_ms" in str(err.value)


def test_round_trip_of_the_new_fields():
    rec = with_sessions()[0]
    table = table_from_records(RequestResult, [rec])
    assert table["session_id"].to_pylist() == ["s1"] and table["turn_index"].to_pylist() == [0]
