"""The family-wise levels the labels read (``labels.step_down_levels``) and the correlation they
count (``variance.residual_correlation``): exact where the rows are independent, one row's worth
where they move as one, the family-wise error rate held at 5% on correlated rows, and an interval
that excludes 1 exactly when its row is rejected."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from specdec.analytics.labels import holm_levels, step_down_levels, z_score
from specdec.analytics.variance import residual_correlation

N = NormalDist()


def independent(_a, _b) -> float:
    return 0.0


def test_independent_rows_get_sidaks_step_down_exactly():
    z = {"a": 5.0, "b": 3.0, "c": 2.9, "d": 2.0, "e": 0.5}
    got = step_down_levels(z, independent)
    # a, b and c are rejected at 0.95^(1/5), ^(1/4), ^(1/3); d fails at ^(1/2) and e keeps that level
    assert [got[k] for k in "abcde"] == pytest.approx([0.95 ** (1 / k) for k in (5, 4, 3, 2, 2)])
    assert step_down_levels({"only": 1.0}, independent) == {"only": pytest.approx(0.95)}
    assert step_down_levels({}, independent) == {}


def test_rows_that_move_as_one_count_as_one():
    """Three rows correlated at 1 (one level's categories with the same figures) beside one
    independent row: the maximum of the three is one |Z|, so the first step is Sidak's for two."""
    z = {"x1": 4.0, "x2": 3.9, "x3": 3.8, "y": 0.1}
    corr = lambda a, b: 1.0 if a[0] == b[0] == "x" else 0.0  # noqa: E731
    got = step_down_levels(z, corr)
    assert got["x1"] == pytest.approx(0.95**0.5, abs=2e-3)
    assert got["y"] == pytest.approx(0.95)


def test_the_levels_never_rise_down_the_ranks_and_read_as_their_rejections():
    rng = np.random.default_rng(3)
    z = {i: float(v) for i, v in enumerate(rng.normal(0, 2.5, 12))}
    corr = lambda a, b: 0.8 if a % 3 == b % 3 else 0.0  # noqa: E731
    got = step_down_levels(z, corr)
    ranked = sorted(z, key=lambda k: -abs(z[k]))
    levels = [got[k] for k in ranked]
    assert all(x >= y - 1e-12 for x, y in zip(levels, levels[1:]))
    # an interval at its level excludes 0 (ratio 1) exactly when its row is rejected: the rejected
    # rows are a prefix of the ranks, each with |z| above its level's quantile
    excludes = [abs(z[k]) > N.inv_cdf((1 + got[k]) / 2) for k in ranked]
    assert excludes == sorted(excludes, reverse=True)
    # and the correlation makes the first level lower than Sidak's for 12 independent rows
    assert levels[0] < 0.95 ** (1 / 12)


def test_the_family_wise_error_rate_holds_on_correlated_null_rows():
    """12 null rows in four groups of three correlated at 0.85 (the demo's rows at a level), 1,500
    families: any row rejected in about 5% of them (binomial SD 0.56 points), and Holm's rate, which
    ignores the correlation, lower."""
    rng = np.random.default_rng(11)
    k = np.arange(12)
    cov = np.where(k[:, None] // 3 == k[None, :] // 3, 0.85, 0.0)
    np.fill_diagonal(cov, 1.0)
    corr = lambda a, b: float(cov[a, b])  # noqa: E731
    draws = rng.multivariate_normal(np.zeros(12), cov, size=1500)
    rejected = holm = 0
    for row in draws:
        z = {i: float(v) for i, v in enumerate(row)}
        got = step_down_levels(z, corr, draws=4000)
        rejected += any(abs(z[i]) > N.inv_cdf((1 + got[i]) / 2) for i in z)
        by_holm = holm_levels({i: 2 * (1 - N.cdf(abs(v))) for i, v in z.items()})
        holm += any(abs(z[i]) > N.inv_cdf((1 + by_holm[i]) / 2) for i in z)
    rate, holm_rate = rejected / len(draws), holm / len(draws)
    assert 0.035 <= rate <= 0.065, rate
    assert holm_rate < rate - 0.005, (holm_rate, rate)


def test_z_score_keeps_the_t_tail():
    t, df = 2.5, 4.0
    z = z_score(t * 0.1, 0.1, df)
    assert 0 < z < t  # a t of 2.5 on 4 df is as rare as a smaller normal deviate
    assert z_score(-0.25, 0.1, df) == pytest.approx(-z)
    assert z_score(0.0, 0.0, df) == 0.0 and z_score(1.0, 0.0, df) == 40.0


def _series(rng, shared_sd: float, own_sd: float, levels=(1, 4, 8), repeats=5):
    shared = {(lv, r): rng.normal(0, shared_sd) for lv in levels for r in range(repeats)}
    return {
        name: {cell: 0.3 * i + shared[cell] + rng.normal(0, own_sd) for cell in shared}
        for i, name in enumerate(("code", "chat"))
    }


def test_series_sent_in_the_same_blocks_correlate_and_independent_ones_read_as_zero():
    rng = np.random.default_rng(5)
    together = [residual_correlation(_series(rng, 0.08, 0.02), {})["code", "chat"] for _ in range(200)]
    apart = [residual_correlation(_series(rng, 0.0, 0.05), {})["code", "chat"] for _ in range(200)]
    # true correlation 0.94: read at its lower bound, so a little below, never above by much
    assert 0.75 < float(np.median(together)) < 0.94
    # no shared noise: the 75% bound reads about half as 0 (an estimate within 0.674 standard errors
    # of 0), and none far from it
    assert 0.35 < float(np.mean([abs(r) < 1e-12 for r in apart])) < 0.65
    assert float(np.quantile(np.abs(apart), 0.95)) < 0.45
    # read as estimated (bound 0), the same noise reaches further: the bound is what keeps it near 0
    raw = [residual_correlation(_series(rng, 0.0, 0.05), {}, 0.0)["code", "chat"] for _ in range(200)]
    assert float(np.quantile(np.abs(raw), 0.95)) > float(np.quantile(np.abs(apart), 0.95)) + 0.1
    assert residual_correlation({"a": {(1, 0): 1.0, (1, 1): 2.0}, "b": {(1, 0): 1.0, (1, 1): 2.0}}, {})["a", "b"] == 0
    assert math.isclose(residual_correlation(_series(rng, 0.08, 0.02), {})["code", "code"], 1.0)
