"""`specdec analytics build LAKE` over the sidecar's Parquet lake, written here
by the sidecar's own Compactor and CounterLake from plugin-style part files.

Lake runs (every row one request per step; k proposed, a accepted):
    r1   req-1: (0,0) prefill, (4,3), (4,1)      req-2: (4,4)
    r/2  req-9: (2,0), (0,0) decode without a draft
so capture_acceptance: r1 3 verify rounds, 12 proposed, 8 accepted ->
length 1 + 8/3, rate 8/12; r/2 1 verify round, 2 proposed, 0 accepted ->
length 1, rate 0.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specdec.analytics.build import build
from specdec.analytics.sql_models import discover
from specdec.capture.sidecar.lake import Compactor, CounterLake
from specdec.errors import InputFileError
from specdec.runfolder import LAKE_ROUNDS_GLOB, lake_rounds_part, round_part_name
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.counters import CounterScrape
from specdec.schemas.records import RoundTrace
from tests.support.duck import rows
from tests.support.synthetic_run import T0, make_rounds, write_run

DAY = 86_400 * 10**9


def _round(run_id, request, step, k, a, phase="decode", day=0) -> RoundTrace:
    return RoundTrace(
        run_id=run_id,
        engine_request_id=request,
        pid=11,
        process_token="11-aaaa",
        step_index=step,
        round_index=step,
        phase=phase,
        tokens_proposed=k,
        tokens_accepted=a,
        tokens_emitted=a + 1,
        batch_size=1,
        num_scheduled_tokens=1 + k,
        context_len=10 + step,
        draft_ms=0.5 if k else None,
        verify_ms=5.0,
        wall_time_ns=T0 + day * DAY + step,
    )


def compact(cap: Path, lake: Path, parts: list[list[RoundTrace]]) -> None:
    """Parts as the plugin writes them, moved into the lake as the sidecar does."""
    cap.mkdir(parents=True, exist_ok=True)
    for seq, part in enumerate(parts):
        write_parquet_atomic(table_from_records(RoundTrace, part), cap / round_part_name("11-aaaa", seq))
    assert Compactor(cap, lake).compact_once().files == len(parts)


def scrape(wall_ns: int, drafts: float | None) -> CounterScrape:
    return CounterScrape(
        wall_time_ns=wall_ns,
        server="http://127.0.0.1:8000",
        spec_num_drafts=drafts,
        spec_num_draft_tokens=None,
        spec_num_accepted_tokens=None,
        generation_tokens=None,
        prefix_cache_queries=None,
        prefix_cache_hits=None,
        kv_cache_usage=0.1,
        requests_running=1.0,
        scrape_ok=drafts is not None,
        error=None if drafts else "HTTP 503",
    )


@pytest.fixture
def lake(tmp_path) -> Path:
    lake = tmp_path / "lake"
    compact(
        tmp_path / "cap",
        lake,
        [
            [
                _round("r1", "req-1", 0, 0, 0, "prefill"),
                _round("r1", "req-1", 1, 4, 3),
                _round("r/2", "req-9", 2, 2, 0),
            ],
            [_round("r1", "req-1", 3, 4, 1), _round("r1", "req-2", 4, 4, 4, day=1), _round("r/2", "req-9", 5, 0, 0)],
        ],
    )
    counters = CounterLake(lake)
    assert counters.write([scrape(T0, 3.0), scrape(T0 + DAY, None)]) == []
    return lake


def test_a_lake_of_two_runs_gives_capture_acceptance_per_run(lake):
    assert len(list(lake.glob(LAKE_ROUNDS_GLOB))) == 5  # (day, run) partitions of the two parts
    db = build(lake)
    assert db == lake / "specdec.duckdb"
    runs = rows(db, "select * from int_run_settings order by run_id")
    assert [(r["run_id"], r["has_manifest"], r["source_path"]) for r in runs] == [
        ("r/2", False, str(lake)),
        ("r1", False, str(lake)),
    ]
    got = {r["run_id"]: r for r in rows(db, "select * from capture_acceptance")}
    assert (got["r1"]["rows"], got["r1"]["engine_requests"], got["r1"]["verify_rounds"]) == (4, 2, 3)
    assert (got["r1"]["tokens_proposed"], got["r1"]["tokens_accepted"]) == (12, 8)
    assert got["r1"]["mean_acceptance_length"] == pytest.approx(1 + 8 / 3)
    assert got["r1"]["acceptance_rate"] == pytest.approx(8 / 12)
    assert (got["r/2"]["verify_rounds"], got["r/2"]["mean_acceptance_length"], got["r/2"]["acceptance_rate"]) == (
        1,
        1.0,
        0.0,
    )
    assert got["r1"]["last_wall_time_ns"] - got["r1"]["first_wall_time_ns"] == DAY + 4
    scrapes = rows(db, "select * from stg_counter_scrapes order by wall_time_ns")
    assert [(s["spec_num_drafts"], s["scrape_ok"]) for s in scrapes] == [(3.0, True), (None, False)]
    for m in discover():  # every model reads (most are empty: a lake has no requests)
        rows(db, f"select count(*) from {m.name}")
    assert rows(db, "select count(*) as n from acceptance") == [{"n": 0}]


def test_lake_rounds_join_the_requests_of_their_run_folder(tmp_path):
    """A run folder without rounds (an external server) beside a lake whose plugin ran
    with the run's id: its marts are those of the same run with the rounds in its folder."""
    (tmp_path / "alone").mkdir()
    (tmp_path / "both" / "t").mkdir(parents=True)
    alone = write_run(tmp_path / "alone")
    both = tmp_path / "both"
    write_run(both / "t", rounds=[])
    (both / "t" / "rounds.parquet").unlink()
    compact(tmp_path / "cap", both, [make_rounds()])
    want = rows(build(alone), "select * from acceptance order by all")
    assert want and rows(build(both), "select * from acceptance order by all") == want


def test_rounds_of_one_run_in_its_folder_and_in_the_lake_are_refused(tmp_path):
    (tmp_path / "t").mkdir()
    write_run(tmp_path / "t")

    compact(tmp_path / "cap", tmp_path, [make_rounds()])
    with pytest.raises(InputFileError, match="they would count twice") as exc:
        build(tmp_path)
    assert str(tmp_path / "rounds") in str(exc.value) and str(tmp_path / "t") in str(exc.value)


def test_a_lake_file_of_another_run_than_its_partition_is_named(lake):
    src = next(p for p in sorted(lake.glob(LAKE_ROUNDS_GLOB)) if p.parent.name == "run_id=r1")
    wrong = lake_rounds_part(lake, src.parent.parent.name.removeprefix("date="), "r3", "11-aaaa", 7)
    wrong.parent.mkdir(parents=True)
    shutil.copy(src, wrong)
    with pytest.raises(InputFileError) as exc:
        build(lake)
    assert str(exc.value).startswith(
        f"{wrong}, row 0, field 'run_id': run_id is 'r1', but its run_id= partition folder is 'r3'"
    )


def test_a_corrupted_lake_file_is_named(lake):
    bad = sorted(lake.glob(LAKE_ROUNDS_GLOB))[-1]
    bad.write_bytes(bad.read_bytes()[:-20])
    with pytest.raises(InputFileError, match="not a readable Parquet file") as exc:
        build(lake)
    assert str(bad) in str(exc.value)
