"""The planner on a built synthetic run (tests/support/plan_run.py): known acceptance and exactly
linear step costs; the predictions must equal the hand computation."""

from __future__ import annotations

import json

import pytest

from specdec.analytics.plan.run import PlanConfig, make_plan, write_plan
from tests.support import plan_run
from tests.support.plan_run import LEVELS, expected_speedup, expected_tau, write_plan_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_plan_run(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def plan(run_dir):
    # the pooled model (``model.predict``), which the hand computation follows; the synthetic requests'
    # e2e (1000 ms each) are not the rounds' (tests/plan/test_met.py, test_plan_inputs.py: met)
    return make_plan(run_dir, PlanConfig(replicates=60, met=False))


def test_the_fits_recover_the_step_costs(plan):
    v = plan["model"]["verify_fit"]
    assert [v["terms"][t]["coef"] for t in v["terms"]] == pytest.approx([plan_run.V0, plan_run.V1, plan_run.V2, 0])
    # no step prefills beside its decode rows: the prompt-token term cannot be told apart
    assert not v["terms"]["v3_per_prefill_token"]["fitted"]
    assert v["rmse_ms"] == pytest.approx(0, abs=1e-9)
    d = plan["model"]["draft_fit"]
    assert [d["terms"][t]["coef"] for t in d["terms"]] == pytest.approx([plan_run.D0, plan_run.D1, 0.0])
    assert not d["terms"]["d2_per_request_per_k"]["fitted"]
    assert any("one k captured" in n for n in plan["notes"])
    # steps that only prefill (verify 99 ms) are not in the fit: 3 levels x 2 arms x 2 repeats x (4 / level) groups x 4 rows
    assert v["steps"] == sum(2 * 2 * (4 // lv) * 4 for lv in LEVELS)


def test_predictions_equal_the_hand_computation(plan):
    assert plan["captured_k"] == 4 and plan["ks"] == [0, 1, 2, 3, 4]
    for a in plan["model"]["acceptance"]:
        assert a["tokens_per_step"] == pytest.approx(expected_tau(a["category"], a["k"]))
    seen = 0
    for cell in plan["cells"]:
        for b in cell["by_k"]:
            # every group is full, so every level's mean decode batch is the level
            assert b["speedup"] == pytest.approx(expected_speedup(cell["category"], b["k"], cell["level"]), rel=1e-9)
            assert b["low"] <= b["speedup"] <= b["high"]
            seen += 1
    assert seen == 2 * len(LEVELS) * 5


def test_recommendations_follow_the_rule(plan):
    """recommend.py's rule on every cell: a k > 0 only where it is eligible (point and interval's lower
    bound above 1), the best eligible point unless a smaller eligible k's paired ratio to it clears
    1 / (1 + margin); off where no k > 0 is eligible."""
    margin = plan["decision_rule"]["margin"]
    assert margin == pytest.approx(0.05)  # the run's (int_run_settings), the default here
    for cell in plan["cells"]:
        by_k = {b["k"]: b for b in cell["by_k"]}
        eligible = [k for k, b in sorted(by_k.items()) if k > 0 and b["speedup"] > 1 and b["low"] > 1]
        assert cell["eligible_ks"] == eligible
        assert [b["k"] for b in cell["by_k"] if b["eligible"]] == eligible
        if not eligible:
            assert (cell["recommended_k"], cell["best_k"]) == (0, 0) and cell["decision"].startswith("off")
            continue
        best = max(eligible, key=lambda k: by_k[k]["speedup"])
        assert cell["best_k"] == best
        k = cell["recommended_k"]
        assert k in eligible and k <= best
        assert cell["speedup"] > 1 and cell["low"] > 1
        if k == best:
            assert cell["ratio_to_best_low"] is None
        else:
            assert cell["ratio_to_best_low"] >= 1 / (1 + margin) and "paired ratio" in cell["decision"]
    # code accepts far more than chat: at c1 code's speedup at its best k is above 1.3 by hand
    code1 = next(c for c in plan["cells"] if c["category"] == "code" and c["level"] == 1)
    assert max(expected_speedup("code", k, 1) for k in range(5)) > 1.3
    assert code1["recommended_k"] > 0


def test_the_rule_reads_the_runs_margin(tmp_path):
    """The margin is the run's (the manifest's --margin, as the speedup labels read it)."""
    wide = make_plan(write_plan_run(tmp_path, margin=0.2), PlanConfig(replicates=20, met=False))
    assert wide["decision_rule"]["margin"] == pytest.approx(0.2)
    assert "1 / (1 + margin) = 0.833" in wide["decision_rule"]["text"]
    for cell in wide["cells"]:
        if cell["ratio_to_best_low"] is not None:
            assert cell["ratio_to_best_low"] >= 1 / 1.2


def test_the_deployed_policy_follows_the_cells(plan):
    """One story: the deployed policy (k per band with the plain pool) speculates for a category only
    at a k predicted at or above 1 in that cell, for the categories whose own decision is a k > 0
    somewhere and whose gain over the bands clears 1; each
    cell's deployed_k is the policy's, and the routing export is its pool."""
    fb = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")
    for cell in plan["cells"]:
        band = next(b for b in fb["bands"] if b["level"] == cell["level"])
        k = band["k"][cell["category"]]
        assert cell["deployed_k"] == k
        if k > 0:
            # never a k predicted below 1 in its cell; the interval is the category's over the bands
            # (recommend._leaves_pool), so a band's own may reach 1
            assert cell["deployed_speedup"] >= 1.0
        else:
            assert cell["deployed_speedup"] == 1.0
    # routing is per category: a pooled category runs the band's one k in every band, the others none
    pooled = {cat for b in fb["bands"] for cat, k in b["k"].items() if k > 0}
    assert pooled == {c["category"] for c in plan["cells"] if c["recommended_k"] > 0} - {
        c["category"] for c in plan["cells"] if c["deployed_note"] and c["deployed_note"].startswith("plain pool")
    }
    for band in fb["bands"]:
        assert len({k for cat, k in band["k"].items() if cat in pooled}) <= 1
        assert all(k == 0 for cat, k in band["k"].items() if cat not in pooled)
    assert set(plan["exports"]["routing"]["pools"]) == {c["category"] for c in plan["cells"]}
    assert {c for c, pool in plan["exports"]["routing"]["pools"].items() if pool == "speculative"} == pooled


def test_policies_and_exports(plan, tmp_path):
    names = [p["name"] for p in plan["policies"]]
    assert names == ["one_k", "k_per_band", "k_per_band_with_fallback"]
    for p in plan["policies"]:
        assert p["overall"]["low"] <= p["overall"]["gain"] <= p["overall"]["high"]
        assert len(p["bands"]) == len(LEVELS)
    fb = plan["policies"][2]
    sched = plan["exports"]["engines"]["vllm"]["schedule"]
    assert [s[:2] for s in sched] == [[1, 1], [2, 2], [3, 4]]
    assert [s[2] for s in sched] == [max(b["k"].values()) for b in fb["bands"]]
    from specdec.engines.vllm.deploy import validate_schedule

    assert validate_schedule(sched) == [tuple(s) for s in sched]
    written = write_plan(plan, tmp_path / "out")
    names = {p.name for p in written}
    assert {"plan.json", "plan.html", "vllm_speculative_config.json", "llama_cpp_flags.txt", "routing.json"} <= names
    html = (tmp_path / "out" / "plan.html").read_text()
    assert html.index("What to deploy") < html.index("Why: per category and load band")
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["cells"] == plan["cells"]


def test_in_sample_check_compares_with_the_measured_speedup(plan, tmp_path):
    # the fixture's e2e is 1000 ms in both arms: measured speedup 1, so the error is the prediction - 1
    for r in plan["in_sample_check"]["cells"]:
        assert r["measured"] == pytest.approx(1.0)
        assert r["relative_error"] == pytest.approx(r["predicted"] - 1)
        assert r["covered"] == (r["predicted_low"] <= 1.0 <= r["predicted_high"])
    assert not all(r["covered"] for r in plan["in_sample_check"]["cells"])

    # a run whose measured speedup is what the model predicts at k = 4: error 0, every cell covered
    def e2e(arm, prompt, level, repeat):
        return 1000.0 if arm == "baseline" else 1000.0 / expected_speedup(plan_run.CATEGORY[prompt], 4, level)

    matched = make_plan(write_plan_run(tmp_path, e2e=e2e), PlanConfig(replicates=40, met=False))
    check = matched["in_sample_check"]
    assert check["median_absolute_relative_error"] == pytest.approx(0, abs=1e-9)
    assert check["coverage"] == 1.0


def test_acceptance_by_context_bucket_pools_back_to_the_category(plan):
    # every synthetic context is < 256 tokens: one bucket per category, equal to the category's figure
    rows = plan["model"]["acceptance_by_context"]
    assert {(r["category"], r["context_low"]) for r in rows} == {("code", 0), ("chat", 0)}
    for r in rows:
        for k, tau in r["tokens_per_step"].items():
            assert tau == pytest.approx(expected_tau(r["category"], int(k)))
