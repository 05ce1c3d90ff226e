"""The planner's inputs as ``inputs.stage`` computes them in one pass over the rounds equal the rows of
the SQL models that define them: int_round_counts (the speculative arm's decode rounds, summed per
request, k_r, a_r and context bucket) and int_plan_steps (the decode-only steps, grouped), on a
classic run and on a --sweep-k run (several analysis runs sharing the reference arm), with rows the
planner must leave out or count apart added: a warm-up request's rows inside replayed steps, a step
that holds a prefill row beside decode rows, and rounds in several context buckets."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.plan import inputs
from specdec.analytics.plan.data import choose_run, rounds_met
from specdec.analytics.plan.run import PlanConfig, make_plan
from tests.support import plan_run
from tests.support.synthetic_run import round_row, write_run

#: the old staging of the rounds: int_round_counts read as the planner read it before
OLD_ROUNDS = """select c.run_id, c.category, k.request_id, coalesce(c.repeat, 0) as repeat, c.context_low,
                       c.tokens_proposed, c.tokens_accepted, sum(c.rounds) as rounds
                from int_round_counts c
                join (select distinct run_id, request_key, request_id from int_engine_requests where replayed) k
                  on k.run_id = c.run_id and k.request_key = c.request_key
                where c.arm = 'speculative' and c.phase = 'decode'
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


def _requests(arms):
    # e2e per request apart, so each category's decode time is its own; one request failed: its
    # rows stay in their steps (batch, drafts) but its rounds and TTFT are not its category's
    rows = plan_run.make_requests(arms, lambda arm, prompt, level, repeat: 1000.0 + 37 * level + 11 * repeat)
    rows = [r.model_copy(update={"ttft_ms": 10.0 + (i % 5)}) for i, r in enumerate(rows)]
    rows[5] = rows[5].model_copy(update={"success": False, "error_type": "timeout"})
    return rows


@pytest.fixture(scope="module", params=["classic", "sweep"])
def staged_run(request, tmp_path_factory):
    arms = plan_run.CLASSIC if request.param == "classic" else plan_run.SWEEP
    requests, rounds = _requests(arms), _rounds(arms)
    run = write_run(
        tmp_path_factory.mktemp(request.param),
        plan_run.make_counters(arms),
        requests=requests,
        rounds=rounds,
        manifest=plan_run._manifest(arms),
    )
    connection = duckdb.connect(str(build(run)), read_only=True)
    inputs.stage(connection)
    yield connection, arms, requests, rounds
    connection.close()


@pytest.fixture(scope="module")
def con(staged_run):
    return staged_run[0]


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
    """The planner runs int_engine_steps' and int_plan_steps' own SQL on its staging of the engine
    requests (analytics/plan/inputs.py): the same rows as the views over int_engine_requests."""
    _same(con, f"select * from {inputs.STEPS_TABLE}", "select * from int_plan_steps")
    ordered = con.execute(f"select * from {inputs.STEPS_TABLE}").fetchall()
    assert ordered == con.execute("select * from int_plan_steps").fetchall()
    # and the steps that prefill: the one with a decode row beside its prefill row among them
    mixed = con.execute(
        f"select sum(steps), min(prefill_tokens) from {inputs.STEPS_TABLE} where has_prefill and has_decode"
    ).fetchone()
    assert mixed[0] >= 1 and mixed[1] > 0
    assert con.execute(f"select count(*) from {inputs.STEPS_TABLE} where has_prefill and not has_decode").fetchone()[0]


def _hand_steps(requests, rounds):
    """int_plan_steps' groups computed by hand from the rows: per (run, arm, level, has_prefill,
    has_decode, batch size, drafts verified, prompt tokens prefilled), the steps (a step:
    process_token and step_index of replayed requests' rows) and the sum of their verify ms."""
    by_id = {q.request_id: q for q in requests}
    steps = defaultdict(list)
    for r in rounds:
        q = by_id.get(r.engine_request_id.removeprefix("chatcmpl-").rsplit("-", 1)[0])
        if q is not None:  # a warm-up's rows are not a replayed request's
            steps[(r.process_token, r.step_index)].append((q, r))
    out = defaultdict(lambda: [0, 0.0])
    for rows in steps.values():
        q, first = rows[0]
        phases = {r.phase for _, r in rows}
        key = (
            q.run_id,
            q.arm,
            q.level,
            "prefill" in phases,
            "decode" in phases,
            first.batch_size,
            sum(r.tokens_proposed for _, r in rows),
            sum(r.num_scheduled_tokens for _, r in rows if r.phase == "prefill"),
        )
        out[key][0] += 1
        out[key][1] += first.verify_ms
    return out


def test_the_steps_equal_the_hand_computation(staged_run):
    con, arms, requests, rounds = staged_run
    if len(set(arms.values())) > 2:
        pytest.skip("the reference arm of a --sweep-k run is in every analysis run: checked on the classic run")
    got = {
        tuple(row[:8]): (row[8], row[9])
        for row in con.execute(
            f"""select run_id, arm, level, has_prefill, has_decode, batch_size, drafts_verified,
                       prefill_tokens, steps, verify_ms_sum
                from {inputs.STEPS_TABLE}"""
        ).fetchall()
    }
    want = _hand_steps(requests, rounds)
    assert set(got) == set(want)
    for key, (n, verify) in want.items():
        assert got[key] == (n, pytest.approx(verify, rel=1e-12)), key


def _hand_met(arms, requests, rounds):
    """``data.rounds_met`` computed by hand from the rows: per (category, level) and arm k, over the
    category's successful requests' decode rounds, the means of their step's batch size, drafts
    (every replayed row of the step) and prompt tokens (its prefill rows); the requests' mean TTFT;
    and (sum of e2e - TTFT - the rounds' verify + draft ms) / rounds."""
    by_id = {q.request_id: q for q in requests}

    def request_of(engine_id):  # chatcmpl-<request id>-<suffix>; a warm-up's is not a replayed request
        return by_id.get(engine_id.removeprefix("chatcmpl-").rsplit("-", 1)[0])

    replayed = [r for r in rounds if request_of(r.engine_request_id) is not None]
    steps = defaultdict(list)
    for r in replayed:
        steps[(r.process_token, r.step_index)].append(r)
    sums = defaultdict(lambda: [0.0] * 5)
    captured = set()
    for r in replayed:
        q = request_of(r.engine_request_id)
        captured.add(q.request_id)
        if r.phase != "decode" or not q.success:
            continue
        step = steps[(r.process_token, r.step_index)]
        got = sums[(q.arm, q.level, q.category)]
        got[0] += 1
        got[1] += r.batch_size
        got[2] += sum(x.tokens_proposed for x in step)
        got[3] += sum(x.num_scheduled_tokens for x in step if x.phase == "prefill")
        got[4] += r.verify_ms + (r.draft_ms or 0.0)
    met = {}
    for (arm, level, cat), (n, b, d, p, engine_ms) in sums.items():
        ok = [q for q in requests if (q.arm, q.level, q.category) == (arm, level, cat) and q.success]
        ttft = sum(q.ttft_ms for q in ok) / len(ok)
        decode_ms = sum(q.e2e_ms - q.ttft_ms for q in ok if q.request_id in captured)
        met.setdefault((cat, level), {})[arms[arm]] = (b / n, d / n, p / n, ttft, (decode_ms - engine_ms) / n)
    return met


def test_the_rounds_met_equal_the_hand_computation(staged_run):
    con, arms, requests, rounds = staged_run
    run_id, ks = choose_run(con, None)
    source = ks[run_id][0]
    got = rounds_met(con, run_id, {r: k for r, (src, k) in ks.items() if src == source})
    want = _hand_met(arms, requests, rounds)
    assert set(got) == set(want) and all(set(got[cell]) == set(want[cell]) for cell in want)
    for cell, by_k in want.items():
        for k, figures in by_k.items():
            assert astuple(got[cell][k]) == pytest.approx(figures, rel=1e-12), (cell, k)
    # the data holds what the figures must tell apart: a category's rounds in a step that prefills
    # (the prefill row added to a decode step), a failed request, each arm's own k
    assert any(m.prefill_tokens > 0 for by_k in got.values() for m in by_k.values())
    assert not all(q.success for q in requests)
    assert sorted({k for by_k in got.values() for k in by_k}) == sorted(set(arms.values()))


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


def test_the_staging_runs_on_a_run_without_categories(staged_run):
    """A database whose requests give no category (REQUESTS_TABLE empty): the statements are written
    without a count column and every table is made, empty where the rounds met nothing."""
    path = staged_run[0].execute("select path from duckdb_databases() where database_name = current_database()")
    fresh = duckdb.connect(path.fetchone()[0], read_only=True)
    try:
        statements = inputs.statements(fresh)
        fresh.execute(next(statements))  # REQUESTS_TABLE
        n_categories = fresh.execute(f"select count(distinct category_key) from {inputs.REQUESTS_TABLE}").fetchone()[0]
        assert n_categories == len({q.category for q in staged_run[2]}) > 1
        fresh.execute(f"delete from {inputs.REQUESTS_TABLE}")
        rest = list(statements)
        assert not any("/*met_" in sql or "as met_" in sql for sql in rest)
        for sql in rest:
            fresh.execute(sql)
        assert fresh.execute(f"select count(*) from {inputs.MET_TABLE}").fetchone()[0] == 0
        assert fresh.execute(f"select count(*) from {inputs.STEPS_TABLE}").fetchone()[0] == 0
    finally:
        fresh.close()


def test_each_category_has_its_count_column(staged_run):
    con = staged_run[0]
    path = con.execute("select path from duckdb_databases() where database_name = current_database()")
    fresh = duckdb.connect(path.fetchone()[0], read_only=True)
    try:
        statements = inputs.statements(fresh)
        fresh.execute(next(statements))
        keys = [r[0] for r in fresh.execute(f"select distinct category_key from {inputs.REQUESTS_TABLE}").fetchall()]
        grouped = [sql for sql in statements if inputs.GROUPED_TABLE in sql.split(" as\n")[0]][0]
        assert sorted(keys) and all(f"as met_{k}" in grouped for k in keys)
    finally:
        fresh.close()
