"""The planner's inputs as ``inputs.stage`` computes them in one pass over the rounds equal the rows of
the SQL models that define them: int_round_counts (the speculative arm's decode rounds, summed per
request, k_r, a_r and context bucket) and int_plan_steps (the decode-only steps, grouped), on a
classic run and on a --sweep-k run (several analysis runs sharing the reference arm), with rows the
planner must leave out or count apart added: a warm-up request's rows inside replayed steps, a step
that holds a prefill row beside decode rows, and rounds in several context buckets."""

from __future__ import annotations

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.plan import inputs
from specdec.analytics.plan.run import PlanConfig, make_plan
from tests.support import plan_run
from tests.support.synthetic_run import round_row, write_run

#: the old staging of the rounds: int_round_counts read as the planner read it before
OLD_ROUNDS = """select run_id, category, request_id, coalesce(repeat, 0) as repeat, context_low,
                       tokens_proposed, tokens_accepted, sum(rounds) as rounds
                from int_round_counts
                where arm = 'speculative' and phase = 'decode'
                group by all"""


def _rounds(arms):
    rows = plan_run.make_rounds(arms)
    # contexts on each side of every bucket's edge (int_round_groups' 0, 256, 512, ..., 4096)
    edges = [255, 256, 511, 512, 1023, 1024, 2047, 2048, 4095, 4096]
    rows = [r.model_copy(update={"context_len": edges[i % len(edges)]}) for i, r in enumerate(rows)]
    extra = []
    for r in rows[::7]:
        if r.batch_size > 1:
            # a warm-up request (not in requests.parquet) with a row in a replayed step: not counted
            extra.append(
                round_row(
                    "chatcmpl-warmup-0-0123abcd",
                    r.pid,
                    r.step_index,
                    0,
                    3,
                    2,
                    r.phase,
                    process_token=r.process_token,
                    batch_size=r.batch_size,
                    verify_ms=r.verify_ms,
                    draft_ms=r.draft_ms,
                )
            )
    decode = [r for r in rows if r.phase == "decode" and r.batch_size > 1]
    # a replayed request's prefill row inside a decode step: the step leaves the fit
    extra.append(decode[0].model_copy(update={"phase": "prefill", "round_index": 99}))
    return rows + extra


@pytest.fixture(scope="module", params=["classic", "sweep"])
def con(request, tmp_path_factory):
    arms = plan_run.CLASSIC if request.param == "classic" else plan_run.SWEEP
    run = write_run(
        tmp_path_factory.mktemp(request.param),
        plan_run.make_counters(arms),
        requests=plan_run.make_requests(arms, lambda *_: 1000.0),
        rounds=_rounds(arms),
        manifest=plan_run._manifest(arms),
    )
    connection = duckdb.connect(str(build(run)), read_only=True)
    inputs.stage(connection)
    yield connection
    connection.close()


def _same(con, new: str, old: str) -> None:
    assert con.execute(f"describe {new}").fetchall() == con.execute(f"describe {old}").fetchall()
    n_new = con.execute(f"select count(*) from ({new})").fetchone()[0]
    assert n_new > 0
    assert n_new == con.execute(f"select count(*) from ({old})").fetchone()[0]
    assert con.execute(f"select count(*) from (({new}) except all ({old}))").fetchone()[0] == 0
    assert con.execute(f"select count(*) from (({old}) except all ({new}))").fetchone()[0] == 0


def test_the_rounds_equal_int_round_counts(con):
    _same(con, f"select * from {inputs.ROUNDS_TABLE}", OLD_ROUNDS)
    # the added rows are in the data: several context buckets, a warm-up request left out
    assert con.execute(f"select count(distinct context_low) from {inputs.ROUNDS_TABLE}").fetchone()[0] == 6
    assert con.execute("select count(*) from int_engine_requests where not replayed").fetchone()[0] == 1


def test_the_steps_equal_int_plan_steps(con):
    _same(con, f"select * from {inputs.STEPS_TABLE}", "select * from int_plan_steps")
    ordered = con.execute(f"select * from {inputs.STEPS_TABLE}").fetchall()
    assert ordered == con.execute("select * from int_plan_steps").fetchall()


def test_the_cache_beside_the_database_is_read_and_follows_a_rebuild(tmp_path):
    run = plan_run.write_plan_run(tmp_path)
    db = build(run)
    config = PlanConfig(replicates=20)
    assert not inputs.cache_path(db).exists()
    first = make_plan(run, config, db=db)  # computes the inputs and writes the cache
    assert inputs.cache_path(db).is_file()
    assert make_plan(run, config, db=db) == first  # from the cache
    # the cache is what a repeat plan reads: doubling its verify times moves the fit
    with duckdb.connect(str(inputs.cache_path(db))) as cache:
        cache.execute(f"update {inputs.STEPS_TABLE} set verify_ms_sum = 2 * verify_ms_sum")
    assert make_plan(run, config, db=db)["model"]["verify_fit"] != first["model"]["verify_fit"]
    # a rebuild renames a new database over the old: the cache written for the old one is not read
    build(run)
    assert make_plan(run, config, db=db) == first
    with duckdb.connect(str(inputs.cache_path(db)), read_only=True) as cache:
        assert cache.execute("select key from cache_key").fetchone()[0] == inputs._cache_key(db)


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch):
    run = plan_run.write_plan_run(tmp_path)
    db = build(run)
    monkeypatch.setattr(inputs, "cache_path", lambda db: tmp_path / "no such folder" / "x.plan-inputs")
    assert make_plan(run, PlanConfig(replicates=20), db=db)["captured_k"] == plan_run.K
