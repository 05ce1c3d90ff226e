"""plan_validation: a plan against a replay of its settings (a synthetic --sweep-k run stands for
the replay; the engine replay itself is not run here), and `specdec plan --validate` orchestrating
it with the replay replaced by that run."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from specdec.analytics.plan.run import PlanConfig, make_plan, write_plan
from specdec.analytics.plan.validate import validation_ks
from specdec.cli.plan import plan_command
from specdec.cli.plan_validate import replay_design, validate_against
from tests.support.plan_run import CATEGORY, SWEEP, write_plan_run, write_validation_run
from tests.support.synthetic_run import make_manifest


def _as_planned(plan):
    """e2e [ms] per (arm, prompt, level, repeat) of a replay that measures the speedups ``plan`` predicted."""
    speedup = {(c["category"], c["level"], b["k"]): b["speedup"] for c in plan["cells"] for b in c["by_k"]}

    def e2e(arm, prompt, level, repeat):
        k = int(arm[1:])  # arms k0, k2, ...
        return 1000.0 if k == 0 else 1000.0 / speedup[(CATEGORY[prompt], level, k)]

    return e2e


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    run = write_validation_run(tmp_path_factory.mktemp("validate"))
    return run, make_plan(run, PlanConfig(replicates=40))


def test_a_replay_that_measures_what_was_predicted_passes(planned, tmp_path):
    _, plan = planned
    ks = validation_ks(plan)  # the k the plan deploys and one it rejects (which depend on its bootstrap)
    arms = {"k0": 0, **{f"k{k}": k for k in ks}}
    out = validate_against(plan, write_plan_run(tmp_path, e2e=_as_planned(plan), arms=arms))
    assert out["cells_compared"] == len(ks) * 2 * 3  # two categories, three levels
    assert out["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9)
    assert out["coverage"] == 1.0 and out["passed"] and out["wrong_cells"] == []
    assert out["ks_validated"] == ks and out["ks_planned_not_measured"] == []


def test_the_command_says_validated_after_a_replay_that_passed(planned, tmp_path):
    run, plan = planned
    arms = {"k0": 0, **{f"k{k}": k for k in validation_ks(plan)}}
    (tmp_path / "replayed").mkdir()
    replayed = write_plan_run(tmp_path / "replayed", e2e=_as_planned(plan), arms=arms)
    out = tmp_path / "plan"
    res = CliRunner().invoke(
        plan_command, [str(run), "-o", str(out), "--replicates", "40", "--validate-with", str(replayed)]
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "plan.json").read_text())["validated"] is True
    assert res.output.splitlines()[0].endswith("; validated by replay):"), res.output
    assert "validation: passed against" in res.output


def test_a_run_without_a_k_the_plan_deploys_does_not_validate_it(planned, tmp_path):
    _, plan = planned
    out = validate_against(plan, write_plan_run(tmp_path, e2e=_as_planned(plan), arms={"k0": 0, "k4": 4}))
    assert out["ks_validated"] == [4]
    assert out["ks_planned_not_measured"] == [k for k in validation_ks(plan) if k != 4] != []
    assert out["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9) and not out["passed"]


def test_a_replay_that_measures_no_gain_fails_and_names_the_cells(planned, tmp_path):
    _, plan = planned
    out = validate_against(plan, write_plan_run(tmp_path, arms=SWEEP))  # every e2e 1000 ms: speedup 1
    assert not out["passed"]
    assert out["median_absolute_relative_error"] > 0.10
    assert all(r["measured"] == pytest.approx(1.0) for r in out["cells"])
    assert {(r["k"], r["category"], r["level"]) for r in out["wrong_cells"]} == {
        (r["k"], r["category"], r["level"])
        for r in out["cells"]
        if not r["predicted_low"] <= 1.0 <= r["predicted_high"]
    }


def test_validate_replays_the_planned_k_and_one_rejected_k(planned, tmp_path, monkeypatch):
    run, plan = planned
    seen = {}

    def fake_replay(cfg):
        seen["arms"] = [(a.name, a.speculation and a.speculation["num_speculative_tokens"]) for a in cfg.arm_specs()]
        seen["levels"], seen["model"] = cfg.levels, cfg.model
        (tmp_path / "replayed").mkdir()
        return write_plan_run(tmp_path / "replayed", e2e=_as_planned(plan), arms=SWEEP)

    monkeypatch.setattr("specdec.replay.experiment.run_replay", fake_replay)
    monkeypatch.setattr("specdec.model.prepare_model", lambda: SimpleNamespace(path="/models/m"))
    out = tmp_path / "plan"
    res = CliRunner().invoke(
        plan_command, [str(run), "-o", str(out), "--replicates", "40", "--validate", "--runs-dir", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    ks = validation_ks(plan)
    assert seen["arms"] == [("k0", None)] + [(f"k{k}", k) for k in ks]
    assert seen["levels"] == [1, 2, 4] and seen["model"] == "/models/m"
    result = json.loads((out / "plan_validation.json").read_text())
    written = json.loads((out / "plan.json").read_text())
    assert written["validated"] == result["passed"]
    assert "validation:" in res.output
    # the first line says what the validation found, never 'not validated' after a pass
    state = "validated by replay" if result["passed"] else "not validated"
    assert res.output.splitlines()[0].endswith(f"; {state}):"), res.output


def test_the_validation_replay_repeats_the_planned_runs_design():
    """The replay sends what the planned run sent: its one forced output length (64 here, not the
    traffic rows' own), no lossless pass or sampling when it had none, its dtype and repeats."""
    planned_run = make_manifest(
        dtype="bfloat16",
        warmup_requests=2,
        sampling={"ignore_eos": True, "max_tokens": [64]},
        schedule={
            "repeats": 3,
            "restart_servers": "never",
            "lossless_pass": False,
            "samples": 0,
            "prefix_cache": "reset",
        },
        timeouts={"connect_s": 5.0, "request_s": 30.0},
    )
    assert replay_design(planned_run) == {
        "repeats": 3,
        "max_tokens": 64,
        "dtype": "bfloat16",
        "warmup_requests": 2,
        "max_error_rate": 0.05,
        "margin": 0.05,
        "connect_timeout_s": 5.0,
        "request_timeout_s": 30.0,
        "lossless_pass": False,
        "samples": 0,
        "restart_servers": "never",
        "prefix_cache": "reset",
    }
    # rows sent with several lengths: each row's own (no override); one repeat: still 2 (intervals)
    mixed = make_manifest(sampling={"max_tokens": [32, 128]}, schedule={"repeats": 1})
    assert replay_design(mixed)["repeats"] == 2 and "max_tokens" not in replay_design(mixed)


def test_without_a_noise_estimate_there_is_no_prediction_interval_and_no_pass(planned, tmp_path):
    """A one-repeat sweep has no measured interval, so no noise estimate (noise.py): the cells
    have no prediction interval, coverage is not computed and the plan cannot pass, however small
    the error; the page says so instead of failing."""
    _, plan = planned
    one = copy.deepcopy(plan)
    for d in one["measurement_noise"].values():
        d.update(block_variance_log=None, df=None)
    for c in one["cells"]:
        c.update(prediction_low=None, prediction_high=None)
    ks = validation_ks(plan)
    out = validate_against(
        one, write_plan_run(tmp_path, e2e=_as_planned(plan), arms={"k0": 0} | {f"k{k}": k for k in ks})
    )
    assert out["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9)
    assert out["coverage"] is None and not out["passed"] and out["wrong_cells"] == []
    assert all(r["covered"] is None and r["predicted_low"] is None for r in out["cells"])
    write_plan(one, tmp_path / "plan")
    assert "n/a (no noise estimate)" in (tmp_path / "plan" / "plan.html").read_text()
