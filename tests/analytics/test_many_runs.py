"""One database over many runs: a folder of run folders builds marts keyed by
run_id whose rows, run by run, equal each run built alone; a malformed file
of one run is named; the report takes one run and compare two of them.

Three hand-built runs share request ids (they all come from conftest, which
names requests sd.t....), so a join that forgot run_id would attribute one
run's rounds to another's requests, and pool their figures:

    run  what                                                    speedup (code, c1)
    a    2 repeats, rounds with drafts, sampling checks          2000 / 1000 = 2.0
    b    test_lossless's greedy checks and timed requests        -
    c    2 repeats, other e2e times and rounds                   2000 / 500  = 4.0
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.report.compare import compare, compare_in
from specdec.analytics.report.data import load_report
from specdec.analytics.report.summary import summary_text
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import record_file
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import RoundTrace, SampleCheck
from tests.support.duck import rows
from tests.support.lossless_run import make_checks, make_rounds, make_timed, write_greedy
from tests.support.sampling_mart import two_arms
from tests.support.synthetic_run import (
    T0,
    make_counters,
    make_manifest,
    repeated_counters,
    repeated_requests,
    write_run,
)

DECODE = {
    "a": {"code": [(4, 4), (4, 2)], "chat": [(4, 1), (4, 0)]},
    "c": {"code": [(4, 0)], "chat": [(4, 3), (4, 3), (4, 3)]},
}
SPECULATIVE_MS = {"a": {"code": 1000.0, "chat": 1600.0}, "c": {"code": 500.0, "chat": 1900.0}}


def relabel(records, run_id: str):
    return [r.model_copy(update={"run_id": run_id}) for r in records]


def rounds_of(requests, decode) -> list[RoundTrace]:
    rows, step = [], 0
    for q in requests:
        for rnd, (k, a) in enumerate([(0, 0), *(decode[q.category] if q.arm == "speculative" else [(0, 0)])]):
            step += 1
            rows.append(
                RoundTrace(
                    run_id=q.run_id,
                    engine_request_id=f"chatcmpl-{q.request_id}-0123abcd",
                    pid=1,
                    process_token="1-cafe",
                    step_index=step,
                    round_index=rnd,
                    phase="prefill" if rnd == 0 else "decode",
                    tokens_proposed=k,
                    tokens_accepted=a,
                    tokens_emitted=a + 1,
                    batch_size=1,
                    num_scheduled_tokens=1 + k,
                    context_len=10 + rnd,
                    draft_ms=1.0 if k else None,
                    verify_ms=10.0,
                    wall_time_ns=T0 + step,
                )
            )
    return rows


def repeated_run(run_dir: Path, run_id: str) -> Path:
    run_dir.mkdir(parents=True)

    def e2e(arm, prompt_id, level, repeat):
        base = 2000.0 + 100 * repeat if arm == "baseline" else SPECULATIVE_MS[run_id][prompt_id[:4]] + 30 * repeat
        return base * level**0.5

    requests = relabel(repeated_requests(e2e), run_id)
    write_run(
        run_dir,
        relabel(repeated_counters(drafts=lambda arm, lv, r: 4.0 if arm == "speculative" else None), run_id),
        requests=requests,
        rounds=rounds_of(requests, DECODE[run_id]),
        manifest=make_manifest(run_id=run_id),
    )
    if run_id == "a":
        checks = relabel(
            two_arms([-float(i) for i in range(40)], [-float(i) - 0.5 for i in range(40)], ends=([5] * 40, [6] * 40)),
            run_id,
        )
        write_parquet_atomic(
            table_from_records(SampleCheck, checks), run_dir / record_file("sample_checks").consolidated
        )
    return run_dir


def lossless_run(run_dir: Path) -> Path:
    """The lossless tests' run (tests/support/lossless_run.py), as run b."""
    run_dir.mkdir(parents=True)
    write_run(
        run_dir,
        relabel(make_counters(), "b"),
        requests=relabel(make_timed(), "b"),
        rounds=relabel(make_rounds(), "b"),
        manifest=make_manifest(run_id="b", dtype="bfloat16", max_error_rate=0.5),
    )
    write_greedy(run_dir, relabel(make_checks(), "b"))
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    repeated_run(root / "a", "a")
    lossless_run(root / "b")
    repeated_run(root / "c", "c")
    os.symlink("c", root / "latest")  # the run folders' `latest` link: not a second run
    return root


def relations_with_run_id(db: Path) -> list[str]:
    return [
        r["table_name"]
        for r in rows(
            db, "select distinct table_name from information_schema.columns where column_name = 'run_id' order by 1"
        )
    ]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def canonical(table: list[dict]) -> list[tuple]:
    return sorted((tuple(r.items()) for r in table), key=repr)


def test_every_relation_holds_each_run_exactly_as_that_run_built_alone(runs):
    together = build(runs)
    assert together == runs / "specdec.duckdb"
    alone = {run: build(runs / run) for run in ("a", "b", "c")}
    assert rows(together, "select run_id from raw_manifest order by run_id") == [{"run_id": r} for r in "abc"]
    names = relations_with_run_id(together)
    for expected in (
        "acceptance",
        "speedup",
        "knee",
        "lossless",
        "sampling",
        "capture_acceptance",
        "int_run_settings",
        "int_speedup_intervals",
        "sampling_tests",
        "raw_rounds",
        "stg_requests",
        "reconciliation",
    ):
        assert expected in names
    checked = 0
    # one read-only connection per database for the 75 x 3 comparisons (issue 40: a connection
    # opened per query, 450 of them, took 15-20 s of this test's 37; 2 s so)
    with duckdb.connect(str(together), read_only=True) as all_runs:
        for run, db in alone.items():
            with duckdb.connect(str(db), read_only=True) as one_run:
                for name in names:
                    got = canonical(rows(all_runs, f"select * from {name} where run_id = ?", [run]))
                    want = canonical(rows(one_run, f"select * from {name}"))
                    assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)), (name, run)
                    checked += bool(want)
    assert checked > 60  # most relations have rows for some run: the comparison is not of empty tables


def test_per_run_figures_differ_and_are_the_hand_checked_ones(runs):
    db = build(runs)
    speedup = {(r["run_id"], r["level"]): r for r in rows(db, "select * from speedup where category = 'code'")}
    assert speedup["a", 1]["speedup"] == pytest.approx(math.sqrt(2000 / 1000 * 2100 / 1030))
    assert speedup["c", 1]["speedup"] == pytest.approx(math.sqrt(2000 / 500 * 2100 / 530))
    assert speedup["a", 1]["ci_low"] is not None and speedup["a", 1]["ci_low"] != speedup["c", 1]["ci_low"]
    acc = {(r["run_id"], r["category"]): r for r in rows(db, "select * from acceptance where arm = 'speculative'")}
    # a/code: (4,4) (4,2) per request -> 1 + 6/2 = 4; c/code: (4,0) -> 1
    assert acc["a", "code"]["mean_acceptance_length"] == 4.0 and acc["c", "code"]["mean_acceptance_length"] == 1.0
    assert acc["c", "chat"]["acceptance_rate"] == 0.75
    captured = {r["run_id"]: r for r in rows(db, "select * from capture_acceptance")}
    assert captured["a"]["verify_rounds"] == 16 * 2  # 16 speculative requests x 2 verify rounds
    pools = rows(db, "select run_id, max(df) as df from int_speedup_intervals group by 1 order by 1")
    # run b has one repeat: no interval; a and c each their own noise: 2 levels x 2 repeats whose
    # figures move with the repeat alone (2000 + 100 r against the speculative time + 30 r, the same
    # at both levels), so the df is that of the repeats: 2 - 1
    assert [r["run_id"] for r in pools] == ["a", "c"]
    assert pools[0]["df"] == pytest.approx(1.0) and pools[1]["df"] == pytest.approx(1.0)

    assert {r["run_id"] for r in rows(db, "select run_id from sampling")} == {"a"}
    assert {r["run_id"] for r in rows(db, "select run_id from lossless where checks > 0")} == {"b"}


def test_the_report_shows_one_run_of_many_as_that_run_alone(runs):
    db = build(runs)
    con = duckdb.connect(str(db), read_only=True)
    try:
        with pytest.raises(SpecdecError, match=r"holds 3 runs \(a, b, c\)"):
            load_report(con)
        from_many = summary_text(load_report(con, "c"))
    finally:
        con.close()
    con = duckdb.connect(str(build(runs / "c")), read_only=True)
    try:
        assert from_many == summary_text(load_report(con))
    finally:
        con.close()


def test_compare_two_runs_of_one_database_as_two_run_folders(runs):
    within, folders = compare_in(runs, "a", "c"), compare(runs / "a", runs / "c")
    assert within.speedup == folders.speedup and within.acceptance == folders.acceptance
    assert within.throughput == folders.throughput and within.settings == folders.settings == []
    code = next(r for r in within.speedup if (r["category"], r["level"]) == ("code", 1))
    assert code["b_over_a"] == pytest.approx(code["b_speedup"] / code["a_speedup"]) and code["b_over_a"] > 1.5
    with pytest.raises(SpecdecError, match="no run 'zz'"):
        compare_in(runs, "a", "zz")


def test_a_malformed_file_of_one_run_is_named(tmp_path):
    for run in ("a", "c"):
        repeated_run(tmp_path / run, run)
    bad = tmp_path / "c" / "requests.parquet"
    bad.write_bytes(bad.read_bytes()[:200])
    with pytest.raises(InputFileError, match="not a readable Parquet file") as exc:
        build(tmp_path)
    assert str(bad) in str(exc.value)
    assert not (tmp_path / "specdec.duckdb").exists()


def test_a_row_of_another_run_is_named_with_its_row(tmp_path):
    run_dir = repeated_run(tmp_path / "a", "a")
    requests = repeated_requests(lambda *_: 1000.0)
    requests = relabel(requests[:3], "a") + relabel(requests[3:4], "zz") + relabel(requests[4:], "a")
    path = run_dir / "requests.parquet"
    write_parquet_atomic(table_from_records(type(requests[0]), requests), path)
    with pytest.raises(InputFileError) as exc:
        build(tmp_path)
    assert str(exc.value).startswith(
        f"{path}, row 3, field 'run_id': run_id is 'zz', but the run folder's manifest.json"
    )


def test_two_run_folders_with_one_run_id_are_refused(tmp_path):
    repeated_run(tmp_path / "a", "a")
    repeated_run(tmp_path / "copy", "a")
    with pytest.raises(InputFileError, match="run_id 'a' is also the run of") as exc:
        build(tmp_path)
    assert str(tmp_path / "copy" / "manifest.json") in str(exc.value)


def test_a_folder_without_runs_or_a_lake_says_what_it_looked_for(tmp_path):
    (tmp_path / "notes").mkdir()
    with pytest.raises(InputFileError, match=r"missing: is this a specdec run folder\? \(nor does"):
        build(tmp_path)


def test_the_database_reads_the_files_in_place_unless_copied(tmp_path):
    run_dir = repeated_run(tmp_path / "a", "a")
    views = rows(build(run_dir), "select view_name from duckdb_views() where view_name = 'raw_requests'")
    assert (
        views
        and str(run_dir / "requests.parquet")
        in rows(run_dir / "specdec.duckdb", "select sql from duckdb_views() where view_name = 'raw_requests'")[0]["sql"]
    )
    copied = build(run_dir, tmp_path / "copied.duckdb", copy=True)
    speedup = rows(copied, "select * from speedup order by all")
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    assert rows(copied, "select * from speedup order by all") == speedup  # self-contained
    in_place = moved / "specdec.duckdb"
    assert rows(in_place, "select * from speedup order by all") == speedup  # marts are stored at build
    with pytest.raises(duckdb.Error, match=r"requests\.parquet"):
        rows(in_place, "select count(*) from stg_requests")  # the raw views name files that moved


def test_footer_checks_name_a_null_as_the_full_read_does(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = repeated_run(tmp_path / "a", "a")
    path = run_dir / "requests.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("prompt_id")
    values = table.column(i).to_pylist()
    values[5] = None
    table = table.set_column(i, pa.field("prompt_id", pa.string(), nullable=True), pa.array(values, pa.string()))
    pq.write_table(table, path, row_group_size=4)  # the null in row group 1
    with pytest.raises(InputFileError) as full:
        build(run_dir, validate="full")
    with pytest.raises(InputFileError) as footer:
        build(run_dir, validate="footer")
    assert str(full.value) == str(footer.value)
    footer = footer.value

    assert str(footer).startswith(f"{path}, row 5, field 'prompt_id': 1 null value(s) in a required column")


def test_the_commands_on_a_folder_of_runs(runs):
    from click.testing import CliRunner

    from specdec.cli.main import main

    built = CliRunner().invoke(main, ["analytics", "build", str(runs), "--validate", "footer"])
    assert built.exit_code == 0 and f"built {runs / 'specdec.duckdb'}" in built.output
    old = CliRunner().invoke(main, ["analytics", "build", str(runs), "--check", "footer"])  # the name until 2026-12-07
    assert old.exit_code == 0 and "deprecated" in old.output and "use --validate" in old.output
    report = CliRunner().invoke(main, ["report", str(runs)])
    assert report.exit_code == 1 and "holds 3 runs (a, b, c)" in report.output
    assert not (runs / "report.html").exists()
    compared = CliRunner().invoke(main, ["compare", "--in", str(runs), "a", "c"])
    assert compared.exit_code == 0 and "A: a" in compared.output and "B: c" in compared.output
    missing = CliRunner().invoke(main, ["compare", "a", "c"])  # without --in: two folders, which do not exist
    assert missing.exit_code == 2 and "--in PATH" in missing.output


def test_a_dictionary_typed_column_reads_as_its_values(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = repeated_run(tmp_path / "a", "a")
    want = rows(build(run_dir), "select * from speedup order by all")
    path = run_dir / "requests.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("category")
    table = table.set_column(
        i,
        pa.field("category", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        table.column(i).dictionary_encode(),
    )
    pq.write_table(table, path)
    for check in ("full", "footer"):
        assert rows(build(run_dir, validate=check), "select * from speedup order by all") == want


def test_a_build_through_the_latest_link_names_the_run_folder_itself(tmp_path):
    run_dir = repeated_run(tmp_path / "a", "a")
    os.symlink("a", tmp_path / "latest")
    db = build(tmp_path / "latest")
    (sql,) = [r["sql"] for r in rows(db, "select sql from duckdb_views() where view_name = 'raw_requests'")]
    assert str(run_dir.resolve() / "requests.parquet") in sql and "latest" not in sql
    assert rows(db, "select source_path from raw_manifest") == [{"source_path": str(run_dir.resolve())}]
