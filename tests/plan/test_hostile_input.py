"""The planner refuses input it cannot plan from by name (issue 42, item 5): step times that are
NaN, infinite or negative (file, row and column named; ``--skip-bad`` leaves them out and counts
them), a run of named arms without its k0 arm, more categories than the staging handles, a damaged
or foreign plan cache (recomputed with a warning), and ``--k`` / ``--sweep-k`` ranges checked
before they are built. Each case ended in a traceback, or in a plan from bad numbers, before."""

from __future__ import annotations

import json
import math
import time

import click
import duckdb
import pytest
from click.testing import CliRunner

from specdec.analytics.build import build
from specdec.analytics.plan import inputs
from specdec.cli.plan import KRange, plan_command
from specdec.errors import SpecdecError
from tests.support import plan_run
from tests.support.synthetic_run import write_run


def _write(run_dir, rounds=None, arms=plan_run.CLASSIC):
    run_dir.mkdir(parents=True)
    return write_run(
        run_dir,
        plan_run.make_counters(arms),
        requests=plan_run.make_requests(arms, lambda *a: 1000.0),
        rounds=plan_run.make_rounds(arms) if rounds is None else rounds,
        manifest=plan_run._manifest(arms),
    )


def _plan(run_dir, out, *args):
    return CliRunner().invoke(plan_command, [str(run_dir), "-o", str(out), "--replicates", "40", *args])


def _decode_rows(rounds):
    return [i for i, r in enumerate(rounds) if r.phase == "decode"]


def _refused(res):
    """Exit 1 with a message, not a traceback (click's own exit, not an exception escaping)."""
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    return res.output


def test_negative_step_times_are_refused_naming_file_row_and_column(tmp_path):
    rounds = plan_run.make_rounds(plan_run.CLASSIC)
    rounds = [
        r.model_copy(
            update={
                "verify_ms": None if r.verify_ms is None else -r.verify_ms,
                "draft_ms": None if r.draft_ms is None else -r.draft_ms,
            }
        )
        for r in rounds
    ]
    run = _write(tmp_path / "run", rounds)
    text = _refused(_plan(run, tmp_path / "plan"))
    assert "rounds.parquet" in text and "row 0" in text and "verify_ms" in text and "negative" in text
    assert not (tmp_path / "plan" / "plan.json").exists()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0])
@pytest.mark.parametrize("column", ["verify_ms", "draft_ms"])
def test_one_bad_step_time_is_refused_naming_its_row(tmp_path, bad, column):
    rounds = plan_run.make_rounds(plan_run.CLASSIC)
    i = next(i for i in _decode_rows(rounds) if getattr(rounds[i], column) is not None)
    rounds[i] = rounds[i].model_copy(update={column: bad})
    run = _write(tmp_path / "run", rounds)
    text = _refused(_plan(run, tmp_path / "plan"))
    assert f"rounds.parquet, row {i}, field '{column}'" in text, text
    assert "--skip-bad" in text


def test_skip_bad_leaves_them_out_counts_them_and_the_fit_stays_exact(tmp_path):
    rounds = plan_run.make_rounds(plan_run.CLASSIC)
    decode = [i for i in _decode_rows(rounds) if rounds[i].draft_ms is not None]
    for i, (column, bad) in zip(decode[::5], [("verify_ms", math.nan), ("verify_ms", -3.0), ("draft_ms", math.inf)]):
        rounds[i] = rounds[i].model_copy(update={column: bad})
    run = _write(tmp_path / "run", rounds)
    res = _plan(run, tmp_path / "plan", "--skip-bad")
    assert res.exit_code == 0, res.output
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    note = next(n for n in plan["notes"] if "left out" in n)
    assert "3 step times" in note and "verify_ms 2" in note and "draft_ms 1" in note
    v = plan["model"]["verify_fit"]["terms"]
    assert [v[t]["coef"] for t in ("v0_intercept", "v1_per_request", "v2_per_draft_token")] == pytest.approx(
        [plan_run.V0, plan_run.V1, plan_run.V2]
    )
    d = plan["model"]["draft_fit"]["terms"]
    assert [d["d0_intercept"]["coef"], d["d1_per_request"]["coef"]] == pytest.approx([plan_run.D0, plan_run.D1])


def test_a_sweep_without_its_k0_arm_is_named(tmp_path):
    run = _write(tmp_path / "run", arms={"k2": 2, "k4": 4})
    for extra in ([], ["--run-id", "t/k4"]):
        text = _refused(_plan(run, tmp_path / "plan", *extra))
        assert "k0" in text and "k2, k4" in text, text
        assert "name one with --run-id" not in text and "no captured decode rounds" not in text


def test_ten_thousand_categories_are_refused_at_once_with_the_limit_named():
    con = duckdb.connect()
    con.execute(
        "create table stg_requests as select 'r' || i as request_id, 'cat-' || i as category, true as success "
        "from range(10000) t(i)"
    )
    started = time.perf_counter()
    with pytest.raises(SpecdecError, match=f"10000 categories.*at most {inputs.MAX_CATEGORIES}"):
        inputs.stage(con)
    assert time.perf_counter() - started < 2.0
    assert not inputs.staged(con)


def test_the_category_limit_is_a_bound_not_an_off_by_one(tmp_path, monkeypatch):
    run = _write(tmp_path / "run")  # two categories, code and chat
    monkeypatch.setattr(inputs, "MAX_CATEGORIES", 1)
    assert "at most 1" in _refused(_plan(run, tmp_path / "refused"))
    monkeypatch.setattr(inputs, "MAX_CATEGORIES", 2)
    assert _plan(run, tmp_path / "planned").exit_code == 0


def _damage_empty_key(path):
    con = duckdb.connect(str(path))
    con.execute("delete from cache_key")
    con.close()


def _damage_foreign_text(path):
    path.write_text("not a database\n")


def _damage_foreign_duckdb(path):
    path.unlink()
    con = duckdb.connect(str(path))
    con.execute("create table something_else as select 1 as x")
    con.close()


def _damage_wrong_key_type(path):
    con = duckdb.connect(str(path))
    con.execute("drop table cache_key")
    con.execute("create table cache_key as select 7 as key, 8 as other")
    con.close()


@pytest.mark.parametrize(
    "damage", [_damage_empty_key, _damage_foreign_text, _damage_foreign_duckdb, _damage_wrong_key_type]
)
def test_a_damaged_or_foreign_plan_cache_is_recomputed_with_a_warning(tmp_path, damage, caplog):
    run = _write(tmp_path / "run")
    db = build(run)
    first = _plan(run, tmp_path / "first", "--db", str(db))
    assert first.exit_code == 0, first.output
    cache = inputs.cache_path(db)
    assert cache.is_file()
    damage(cache)
    caplog.clear()
    again = _plan(run, tmp_path / "again", "--db", str(db))
    assert again.exit_code == 0, again.output
    assert any("planner inputs cache" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    cells = [json.loads((tmp_path / d / "plan.json").read_text())["cells"] for d in ("first", "again")]
    assert cells[0] == cells[1]
    caplog.clear()  # the cache was written again: the next plan reads it without a word
    assert _plan(run, tmp_path / "third", "--db", str(db)).exit_code == 0
    assert not any("planner inputs cache" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("text", ["0..1000000000", "5..99999999999999999999", "0..65"])
def test_a_k_range_is_checked_before_it_is_built(text):
    started = time.perf_counter()
    with pytest.raises(click.BadParameter, match="k above 64"):
        KRange().convert(text, None, None)
    assert time.perf_counter() - started < 0.5


def test_plan_k_and_sweep_k_refuse_a_huge_range_by_name(tmp_path):
    from specdec.cli import replay as replay_cli

    res = CliRunner().invoke(plan_command, [str(tmp_path), "-o", str(tmp_path / "p"), "--k", "0..1000000000"])
    assert res.exit_code == 2 and "k above 64" in res.output
    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"prompt_id": "p", "category": "code", "prompt": "x", "max_tokens": 4}\n')
    res = CliRunner().invoke(
        replay_cli.main, [str(traffic), "--sweep-k", "0..1000000000", "--runs-dir", str(tmp_path / "r")]
    )
    assert res.exit_code == 2 and "k above 64" in res.output and "--sweep-k" in res.output


def test_a_speedup_row_with_infinite_df_pools_to_a_finite_noise_estimate():
    from specdec.analytics.plan.noise import EXACT_DF, pooled_noise, prediction_interval

    # a run whose blocks agree exactly: the mart's interval has width 0 and infinite df
    noise = pooled_noise([("t/k2", 1.0, 1.0, math.inf, 2), ("t/k4", 0.9, 1.1, 3.0, 2)])
    assert noise.variance == 0.0 and noise.df == EXACT_DF
    json.dumps(noise.as_dict(), allow_nan=False)  # plan.json holds it
    low, high = prediction_interval(1.5, 1.4, 1.6, noise, 2, 0.95)
    assert (low, high) == pytest.approx((1.4, 1.6))  # no noise added to the bootstrap's interval
