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
from specdec.analytics.plan.data import DRAFT_TERMS, VERIFY_TERMS, PlanInputs
from specdec.analytics.plan.fit import LinearFit
from specdec.analytics.plan.model import StepCost, predict, round_sums
from specdec.analytics.plan.noise import MeasurementNoise, block_variance, pooled_noise, prediction_interval
from specdec.analytics.variance import block_noise, t_quantile


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


# the synthetic world
P_ACCEPT = 0.6  # each draft position accepted with this probability, given the ones before it
K = 4
LEVELS = [1, 4, 8]
REPEATS = 2
REQUESTS = 24  # per repeat
ROUNDS = 12  # per request
COST = StepCost((20.0, 2.0, 1.0), (1.0, 0.2, 0.05))
COEF_SE = np.array([1.0, 0.1, 0.05])  # the verify fit's standard errors [ms]
S_REPEAT, S_BLOCK = 0.06, 0.04  # the measurement's noise, log scale


def _true_speedup(k: int, level: int) -> float:
    """The expected speedup: tau and dbar from the acceptance distribution itself."""
    pa = np.array([P_ACCEPT**i * (1 - P_ACCEPT) for i in range(K)] + [P_ACCEPT**K])
    a = np.arange(K + 1)
    n = np.array([[(x // (kk + 1) + 1) for kk in range(K + 1)] for x in a])
    tau = (pa @ (1 + a)) / (pa @ n)
    dbar = (pa @ (n * np.minimum(K, np.arange(K + 1))[None, :])) / (pa @ n)
    return float(predict(tau, dbar, COST, level, level)["speedup"][k])


def _inputs(rng: np.random.Generator, noise: MeasurementNoise) -> PlanInputs:
    j = REQUESTS * REPEATS
    u = rng.random((j * ROUNDS, K))
    accepted = np.cumprod(u < P_ACCEPT, axis=1).sum(axis=1)
    request = np.repeat(np.arange(j), ROUNDS)
    sums = round_sums(request, np.full(len(request), K), accepted, np.ones(len(request)), request // REQUESTS, K)
    cov = np.diag(COEF_SE**2)
    verify = LinearFit(VERIFY_TERMS, VERIFY_TERMS, rng.normal(COST.verify, COEF_SE), cov, 1000, 1.0, 30.0)
    draft = LinearFit(DRAFT_TERMS, DRAFT_TERMS, np.array(COST.draft), np.zeros((3, 3)), 1000, 0.1, 2.0)
    return PlanInputs(
        "sim", ["code"], LEVELS, K, {"code": sums}, verify, draft,
        {lv: float(lv) for lv in LEVELS}, {lv: True for lv in LEVELS}, {}, {"code": 64.0}, {"code": j},
        "vllm", None, {}, {}, {}, spec_batch={k: {lv: float(lv) for lv in LEVELS} for k in range(1, K + 1)},
        noise={"code": noise},
    )  # fmt: skip


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
    log_true = np.log([_true_speedup(k, lv) for lv in LEVELS])
    covered, covered_ci = [], []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        noise = _noise_from_sweep(rng, log_true)
        pred = predictions(_inputs(rng, noise), [0, k], replicates=120, seed=seed)
        lo, hi = pred.interval("speedup")
        p = float(pred.point["speedup"][1, li, 0])
        pi = prediction_interval(p, float(lo[1, li, 0]), float(hi[1, li, 0]), noise, REPEATS, 0.95)
        fresh = math.exp(_measure(rng, log_true, REPEATS)[li].mean())
        covered.append(pi[0] <= fresh <= pi[1])
        covered_ci.append(lo[1, li, 0] <= fresh <= hi[1, li, 0])
    assert 0.90 <= np.mean(covered) <= 0.99, np.mean(covered)
    assert np.mean(covered_ci) < 0.75, np.mean(covered_ci)
