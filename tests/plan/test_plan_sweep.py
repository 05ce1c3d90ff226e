"""The planner on a synthetic --sweep-k run (arms k0, k2, k4; tests/support/plan_run.py): it plans
from the k = 4 capture, fits the draft cost's dependence on k over every arm, and its prediction at
k = 2 is checked against the k2 arm's measured speedup."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specdec.analytics.plan.bootstrap import _cost, predictions
from specdec.analytics.plan.noise import MeasurementNoise
from specdec.analytics.plan.predict import predict
from specdec.analytics.plan.run import PlanConfig, make_plan
from tests.support import plan_run
from tests.support.plan_run import CATEGORY, D2, SWEEP, expected_speedup, write_plan_run
from tests.support.plan_world import plan_inputs


def _e2e(arm, prompt, level, repeat):
    k = SWEEP[arm]
    return 1000.0 if k == 0 else 1000.0 / expected_speedup(CATEGORY[prompt], k, level, d2=D2)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    run = write_plan_run(tmp_path_factory.mktemp("sweep"), e2e=_e2e, arms=SWEEP, d2=D2)
    return make_plan(run, PlanConfig(replicates=40, met=False))  # the pooled model, as the hand computation


def test_the_largest_k_is_planned_and_every_arm_fits_the_draft_cost(plan):
    assert plan["run_id"] == "t/k4" and plan["captured_k"] == 4
    d = plan["model"]["draft_fit"]["terms"]
    assert [d[t]["coef"] for t in d] == pytest.approx([plan_run.D0, plan_run.D1, D2])
    assert d["d2_per_request_per_k"]["fitted"]
    assert not any("one k captured" in n for n in plan["notes"])


def test_predictions_use_the_fitted_k_dependence(plan):
    for cell in plan["cells"]:
        for b in cell["by_k"]:
            want = expected_speedup(cell["category"], b["k"], cell["level"], d2=D2)
            assert b["speedup"] == pytest.approx(want, rel=1e-9)


def test_the_prediction_at_k2_matches_the_k2_arm(plan):
    check = plan["cross_k_check"]
    assert {r["k"] for r in check["cells"]} == {2}
    assert check["cells"] and len(check["cells"]) == 2 * 3
    assert check["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9)
    assert check["coverage"] == 1.0
    assert set(check["by_category"]) == {"code", "chat"}
    assert plan["in_sample_check"]["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9)


def test_the_page_shows_both_checks(plan, tmp_path):
    from specdec.analytics.plan.run import write_plan

    write_plan(plan, tmp_path)
    html = (tmp_path / "plan.html").read_text()
    assert html.index("What to deploy") < html.index("In-sample check") < html.index("Across k")


def test_the_speculative_batch_is_each_swept_arms_own(plan):
    for band in plan["bands"]:
        how = {k: v["how"] for k, v in band["mean_decode_batch_speculative"].items()}
        assert how == {"1": "nearest", "2": "measured", "3": "interpolated", "4": "measured"}


def test_spec_batch_at_measured_interpolated_nearest_and_baseline():
    base = plan_inputs(np.random.default_rng(0), MeasurementNoise(None, None, None, 0, ""))
    inputs = replace(base, spec_batch={2: {8: 6.0}, 8: {8: 5.0, 4: 3.5}})
    assert inputs.spec_batch_at(2, 8) == (6.0, "measured")
    assert inputs.spec_batch_at(5, 8) == (pytest.approx(5.5), "interpolated")
    assert inputs.spec_batch_at(1, 8) == (6.0, "nearest")  # not B_0 = 8: that is no speculative batch
    assert inputs.spec_batch_at(2, 4) == (3.5, "nearest")
    assert inputs.spec_batch_at(3, 1) == (1.0, "baseline")  # no speculative step measured at c1


def test_each_k_is_predicted_at_its_own_speculative_batch():
    """... and with the draft cost of its own k, not of its index among the k planned (d2 > 0 here;
    with --k 0,2,3,4 the index of k = 4 is 3)."""
    base = plan_inputs(np.random.default_rng(0), MeasurementNoise(None, None, None, 0, ""))
    inputs = replace(base, spec_batch={2: {4: 3.0}, 4: {4: 2.0}})
    pred = predictions(inputs, [0, 2, 3, 4], replicates=20)
    rs = inputs.rounds["code"]
    cost = _cost(inputs.verify_fit.coef, inputs.draft_fit.coef)
    for i, (k, b) in enumerate([(2, 3.0), (3, 2.5), (4, 2.0)], start=1):
        want = predict(rs.tau()[[0, k]], rs.dbar()[[0, k]], cost, 4.0, b, np.array([0, k]))["speedup"][1]
        assert pred.point["speedup"][i, 1, 0] == pytest.approx(want)
