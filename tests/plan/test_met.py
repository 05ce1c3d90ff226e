"""The prediction from the steps a category's rounds met (``model.StepsMet``, ``predict_met``) on
hand-checkable numbers, and ``bootstrap.predictions`` with and without them (issue 23's c8 bias)."""

from __future__ import annotations

import math
from dataclasses import astuple, replace

import numpy as np
import pytest

from specdec.analytics.plan.bootstrap import predictions
from specdec.analytics.plan.noise import MeasurementNoise
from specdec.analytics.plan.predict import StepCost, StepsMet, met_at, predict_met
from tests.support.plan_world import plan_inputs

COST = StepCost((10.0, 2.0, 0.5, 0.1), (1.0, 0.25, 0.0))


def test_a_step_holding_a_prefill_costs_the_prefill_term_and_three_terms_still_work():
    assert COST.verify_ms(4, 2, 30) == pytest.approx(10 + 8 + 1 + 3)
    assert StepCost((10.0, 2.0, 0.5), (0, 0, 0)).verify_ms(4, 2, 30) == pytest.approx(10 + 8 + 1)


def test_predict_met_by_hand():
    # the baseline's rounds met 8 requests and 20 prompt tokens per step; k = 2's met 6, 3 drafts, 50
    met = [StepsMet(8.0, 0.0, 20.0, 100.0, 1.0), StepsMet(6.0, 3.0, 50.0, 80.0, 2.5)]
    tokens = np.array([[10.0, 10.0], [10.0, 10.0]])
    rounds = np.array([[10.0, 5.0], [10.0, 2.0]])  # request 0: 5 rounds at k = 2, request 1: 2
    out = predict_met(np.array([1.0, 20 / 7]), tokens, rounds, COST, met, np.array([0, 2]))
    step0 = 10 + 16 + 0 + 2 + 1  # 29: no drafts without speculation; 1 ms outside the step
    step2 = 10 + 12 + 1.5 + 5 + (1 + 0.25 * 6) + 2.5  # 33.5
    assert out["step_ms"] == pytest.approx([step0, step2])
    base = 100 + 10 * step0  # each request's baseline e2e
    assert out["speedup"][1] == pytest.approx(math.sqrt(base / (80 + 5 * step2) * base / (80 + 2 * step2)))
    assert out["speedup_of_rates"][1] == pytest.approx(20 / 7 * step0 / step2)
    assert out["speedup"][0] == pytest.approx(1.0)
    assert out["system_tokens_per_s"] == pytest.approx([8 * 1000 / step0, 6 * 1000 * 20 / 7 / step2])


def test_met_at_measured_interpolated_nearest():
    by_k = {0: StepsMet(8, 0, 1, 500), 2: StepsMet(8, 6, 20, 300, 2.0), 8: StepsMet(7, 15, 32, 280, 3.5)}
    assert met_at(by_k, 2) == (by_k[2], "measured")
    got, how = met_at(by_k, 4)
    assert how == "interpolated"
    assert astuple(got) == pytest.approx((8 - 1 / 3, 9, 24, 300 - 20 / 3, 2.5))
    assert met_at(by_k, 1) == (by_k[2], "nearest")  # not the baseline's: that met no drafts
    with pytest.raises(ValueError):
        met_at({0: by_k[0]}, 2)


def test_predictions_read_what_the_rounds_met_where_given():
    """The c8 mechanism on synthetic inputs: the arm's mean decode batch is 6 (the block's tail) but
    the category's rounds met 8 requests and a prefill chunk in some steps; predicted from what
    they met, the speedup is lower, and it equals predict_met's; a level without it is unchanged."""
    inputs = plan_inputs(np.random.default_rng(0), MeasurementNoise(None, None, None, 0, ""))
    inputs = replace(inputs, spec_batch={2: {8: 6.0}, 4: {8: 6.0}}, batch={**inputs.batch, 8: 8.0})
    plain = predictions(inputs, [0, 2], replicates=30)
    rs = inputs.rounds["code"]
    drafts = 8.0 * rs.dbar()[2]  # the mix's drafts per request (one category: its own) at B = 8
    met = {("code", 8): {0: StepsMet(8.0, 0.0, 0.0, 0.0), 2: StepsMet(8.0, drafts, 40.0, 0.0)}}
    given = predictions(inputs, [0, 2], replicates=30, met=met)
    li = inputs.levels.index(8)
    assert given.point["speedup"][1, li, 0] < plain.point["speedup"][1, li, 0]
    cost = StepCost(tuple(inputs.verify_fit.coef), tuple(inputs.draft_fit.coef))
    want = predict_met(
        rs.tau()[[0, 2]],
        rs.tokens[:, [0, 2]],
        rs.rounds[:, [0, 2]],
        cost,
        list(met[("code", 8)].values()),
        np.array([0, 2]),
    )
    assert given.point["speedup"][1, li, 0] == pytest.approx(want["speedup"][1])
    lo, hi = given.interval("speedup")
    assert lo[1, li, 0] < given.point["speedup"][1, li, 0] < hi[1, li, 0]
    # only k = 4 swept: k = 2 takes its batch and prefill, and the drafts of its own k (r = 1 here)
    at4 = {("code", 8): {0: met[("code", 8)][0], 4: StepsMet(8.0, 8.0 * rs.dbar()[4], 40.0, 0.0)}}
    from4 = predictions(inputs, [0, 2], replicates=30, met=at4)
    assert from4.point["speedup"][1, li, 0] == pytest.approx(want["speedup"][1])
    other = [i for i, lv in enumerate(inputs.levels) if lv != 8]
    assert given.point["speedup"][:, other] == pytest.approx(plain.point["speedup"][:, other])


def test_the_geometric_mean_of_e2e_ratios_exceeds_the_ratio_of_pooled_rates_when_requests_differ():
    """The speedup mart's definition: with one request gaining much and one little, the geometric
    mean of their ratios is above the pooled rate's ratio (without TTFT and at equal steps: 3 > 1.6)."""
    met = [StepsMet(1.0, 0.0, 0.0, 0.0), StepsMet(1.0, 0.0, 0.0, 0.0)]
    flat = StepCost((10.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    tokens = np.array([[9.0, 9.0], [9.0, 9.0]])
    rounds = np.array([[9.0, 1.0], [9.0, 9.0]])  # 9x and 1x
    out = predict_met(np.array([1.0, 18 / 10]), tokens, rounds, flat, met, np.array([0, 8]))
    assert out["speedup"][1] == pytest.approx(3.0)
    assert out["speedup_of_rates"][1] == pytest.approx(1.8)


def test_met_at_scales_the_drafts_of_a_k_not_swept_by_the_mixs_drafts_per_step():
    """Below the smallest swept k a k' is charged its own drafts, not that k's: D = B dbar_mix(k') r,
    r = D / (B dbar_mix(k)) at the swept k (here r = 1 at k = 2, 15 / 15.75 at k = 8)."""
    by_k = {0: StepsMet(8, 0, 1, 500), 2: StepsMet(8, 6, 20, 300), 8: StepsMet(7, 15, 32, 280)}
    dbar_mix = np.array([0, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25])
    got, how = met_at(by_k, 1, dbar_mix)
    assert how == "nearest" and got.drafts == pytest.approx(8 * 0.5) and got.batch == 8
    got, how = met_at(by_k, 4, dbar_mix)
    r = 1 + (15 / (7 * 2.25) - 1) / 3
    assert how == "interpolated" and got.drafts == pytest.approx((8 - 1 / 3) * 1.25 * r)
    assert met_at(by_k, 8, dbar_mix)[0] == by_k[8]  # a swept k: as measured
