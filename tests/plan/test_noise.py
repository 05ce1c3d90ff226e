"""The prediction interval of a measured speedup (analytics/plan/noise.py): by hand, and its
coverage of a fresh synthetic measurement over many seeds, where the world is known: rounds with
a known per-position acceptance, a known step cost, and measurements whose repeats and blocks
carry known noise (the speedup mart's model: a shift per repeat shared by the levels plus a
block's own noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.analytics.plan.bootstrap import predictions
from specdec.analytics.plan.noise import MeasurementNoise, block_variance, pooled_noise, prediction_interval
from specdec.analytics.variance import block_noise, t_quantile
from tests.support.plan_world import LEVELS, REPEATS, S_BLOCK, S_REPEAT, plan_inputs, true_speedup


def test_block_variance_inverts_the_marts_interval():
    v, df, r = 0.02, 3.0, 2
    half = t_quantile(0.975, df) * math.sqrt(v / r)
    assert block_variance(math.exp(0.1 - half), math.exp(0.1 + half), df, r) == pytest.approx(v)
    assert block_variance(None, None, None, 1) is None  # one repeat: the mart has no interval


def test_pooling_weighs_by_df_and_discounts_the_shared_reference():
    half = lambda v, df: t_quantile(0.975, df) * math.sqrt(v / 2)  # noqa: E731
    rows = [("k2", math.exp(-half(0.01, 2.0)), math.exp(half(0.01, 2.0)), 2.0, 2)] * 3  # three levels, one V
    rows += [("k4", math.exp(-half(0.04, 6.0)), math.exp(half(0.04, 6.0)), 6.0, 2)]
    noise = pooled_noise(rows)
    assert noise.variance == pytest.approx((2 * 0.01 + 6 * 0.04) / 8)
    assert noise.df == pytest.approx(8 / 1.25) and noise.runs == 2 and noise.repeats == 2
    none = pooled_noise([("k2", None, None, None, 1)])
    assert none.variance is None and "one repeat" in none.how


def test_prediction_interval_by_hand():
    noise = MeasurementNoise(0.02, 4.0, 2, 1, "")
    lo, hi = prediction_interval(2.0, 1.8, 2.5, noise, 2, 0.95)
    m = t_quantile(0.975, 4.0) * math.sqrt(0.01)
    assert math.log(lo) == pytest.approx(math.log(2) - math.hypot(math.log(2 / 1.8), m))
    assert math.log(hi) == pytest.approx(math.log(2) + math.hypot(math.log(2.5 / 2), m))
    # one repeat measured: wider; no noise estimate: no interval
    assert prediction_interval(2.0, 1.8, 2.5, noise, 1, 0.95)[1] > hi
    assert prediction_interval(2.0, 1.8, 2.5, MeasurementNoise(None, None, None, 0, ""), 2, 0.95) == (None, None)


def _measure(rng: np.random.Generator, log_true: np.ndarray, repeats: int) -> np.ndarray:
    """Block figures (level, repeat): the true log speedup + a shift per repeat + a block's noise."""
    return (
        log_true[:, None] + rng.normal(0, S_REPEAT, repeats)[None, :] + rng.normal(0, S_BLOCK, (len(LEVELS), repeats))
    )


def _noise_from_sweep(rng: np.random.Generator, log_true: np.ndarray) -> MeasurementNoise:
    """What the plan reads: the speedup mart's pointwise intervals of the sweep's own measurement."""
    fig = _measure(rng, log_true, REPEATS)
    bn = block_noise({(lv, r): fig[i, r] for i, lv in enumerate(LEVELS) for r in range(REPEATS)})
    assert bn is not None
    half = t_quantile(0.975, bn.df) * math.sqrt(bn.variance / REPEATS)
    rows = [("sim", math.exp(m - half), math.exp(m + half), bn.df, REPEATS) for m in fig.mean(axis=1)]
    return pooled_noise(rows)


def test_the_prediction_interval_covers_a_fresh_measurement_at_its_nominal_rate():
    """300 worlds: each plans from a fresh capture and sweep, and a fresh replay measures k = 2 at
    c4. The 95% prediction interval should hold about 95% of those measurements (binomial sd 1.3
    points: 0.90-0.99 is about 4 sd either way), and the expected speedup's interval alone far
    fewer (the test could tell the two apart)."""
    k, li = 2, 1
    log_true = np.log([true_speedup(k, lv) for lv in LEVELS])
    covered, covered_ci = [], []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        noise = _noise_from_sweep(rng, log_true)
        pred = predictions(plan_inputs(rng, noise), [0, k], replicates=120, seed=seed)
        lo, hi = pred.interval("speedup")
        p = float(pred.point["speedup"][1, li, 0])
        pi = prediction_interval(p, float(lo[1, li, 0]), float(hi[1, li, 0]), noise, REPEATS, 0.95)
        fresh = math.exp(_measure(rng, log_true, REPEATS)[li].mean())
        covered.append(pi[0] <= fresh <= pi[1])
        covered_ci.append(lo[1, li, 0] <= fresh <= hi[1, li, 0])
    assert 0.90 <= np.mean(covered) <= 0.99, np.mean(covered)
    assert np.mean(covered_ci) < 0.75, np.mean(covered_ci)
