"""The planner on a synthetic --sweep-k run (arms k0, k2, k4; tests/support/plan_run.py): it plans
from the k = 4 capture, fits the draft cost's dependence on k over every arm, and its prediction at
k = 2 is checked against the k2 arm's measured speedup."""

from __future__ import annotations

import pytest

from specdec.analytics.plan.run import PlanConfig, make_plan
from tests.support import plan_run
from tests.support.plan_run import CATEGORY, D2, SWEEP, expected_speedup, write_plan_run


def _e2e(arm, prompt, level, repeat):
    k = SWEEP[arm]
    return 1000.0 if k == 0 else 1000.0 / expected_speedup(CATEGORY[prompt], k, level, d2=D2)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    run = write_plan_run(tmp_path_factory.mktemp("sweep"), e2e=_e2e, arms=SWEEP, d2=D2)
    return make_plan(run, PlanConfig(replicates=40))


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
