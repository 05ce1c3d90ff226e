"""The planner's formulas on hand-checkable numbers (no database)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analytics.plan.fit import fit_grouped
from specdec.analytics.plan.predict import StepCost, predict, round_sums


def test_resegmentation_gives_tau_and_dbar_per_k():
    # request 0: rounds (4,4) and (4,1); request 1: (4,0) twice and one round without drafts
    rs = round_sums(
        np.array([0, 0, 1, 1]),
        np.array([4, 4, 4, 0]),
        np.array([4, 1, 0, 0]),
        np.array([1, 1, 2, 1]),
        np.array([0, 0, 0, 0]),
        4,
    )
    # 10 tokens (5 + 2 + 2 * 1 + 1) at every k'. Rounds at k' (a // (k' + 1) + 1 per round):
    # k'=0: 5+2+2+1 = 10; k'=1: 3+1+2+1 = 7; k'=2 and 3: 2+1+2+1 = 6; k'=4 (captured): 1+1+2+1 = 5.
    # Drafts (rounds x min(k_r, k')): k'=1: 3+1+2 = 6; k'=2: 4+2+4 = 10; k'=3: 6+3+6 = 15; k'=4: 4+4+8 = 16
    assert rs.tau() == pytest.approx([1.0, 10 / 7, 10 / 6, 10 / 6, 10 / 5])
    assert rs.dbar() == pytest.approx([0.0, 6 / 7, 10 / 6, 15 / 6, 16 / 5])
    assert rs.rounds[:, -1].tolist() == [2, 3]  # the captured rounds
    # weights 2, 0: only request 0, twice -> its ratio
    assert rs.tau(np.array([2.0, 0.0]))[4] == pytest.approx((5 + 2) / 2)
    assert rs.tau(np.array([2.0, 0.0]))[1] == pytest.approx((5 + 2) / (3 + 1))


def test_prediction_formula():
    cost = StepCost((10.0, 2.0, 0.5), (1.0, 0.25, 0.0))
    out = predict(np.array([1.0, 1.5, 2.0]), np.array([0.0, 1.0, 2.0]), cost, batch=4)
    step = [10 + 8, 10 + 8 + 0.5 * 4 * 1 + 1 + 1, 10 + 8 + 0.5 * 4 * 2 + 2]
    assert out["step_ms"] == pytest.approx(step)
    assert out["tokens_per_s"] == pytest.approx([1000 / step[0], 1500 / step[1], 2000 / step[2]])
    assert out["speedup"] == pytest.approx([1.0, 1.5 * step[0] / step[1], 2.0 * step[0] / step[2]])
    assert out["system_tokens_per_s"] == pytest.approx(4 * out["tokens_per_s"])


def test_grouped_fit_equals_the_fit_on_every_step_and_drops_what_it_cannot_tell():
    rng = np.random.default_rng(1)
    b = rng.integers(1, 9, 300)
    d = rng.integers(0, 20, 300)
    y = 3 + 1.5 * b + 0.2 * d + rng.normal(0, 0.5, 300)
    full = np.linalg.lstsq(np.c_[np.ones(300), b, d], y, rcond=None)[0]
    keys = sorted(set(zip(b, d)))
    groups = [(kb, kd, y[(b == kb) & (d == kd)]) for kb, kd in keys]
    fit = fit_grouped(
        np.array([[1, kb, kd] for kb, kd, _ in groups]),
        ("a", "b", "c"),
        np.array([len(v) for *_, v in groups]),
        np.array([v.sum() for *_, v in groups]),
        np.array([(v**2).sum() for *_, v in groups]),
    )
    assert fit.coef == pytest.approx(full)
    resid = y - np.c_[np.ones(300), b, d] @ full
    assert fit.rmse_ms == pytest.approx(np.sqrt((resid**2).mean()))
    # a column equal to 2 * b is not fitted: coefficient 0, the others as before
    fit2 = fit_grouped(
        np.array([[1, kb, 2 * kb] for kb, kd, _ in groups]),
        ("a", "b", "bk"),
        np.array([len(v) for *_, v in groups]),
        np.array([v.sum() for *_, v in groups]),
        np.array([(v**2).sum() for *_, v in groups]),
    )
    assert fit2.fitted == ("a", "b") and fit2.coef[2] == 0


def test_large_repeats_are_resampled_in_buckets_that_keep_the_totals(monkeypatch):
    from specdec.analytics.plan import bootstrap

    monkeypatch.setattr(bootstrap, "BUCKET_ABOVE", 4)
    monkeypatch.setattr(bootstrap, "BUCKETS", 3)
    rows = np.arange(24, dtype=float).reshape(12, 2)
    cluster = np.array([0] * 9 + [1] * 3)  # repeat 0: 9 requests > 4 -> 3 buckets; repeat 1: 3 requests kept
    units, members = bootstrap.resampling_units(rows, cluster)
    assert len(units) == 3 + 3 and [len(m) for m in members] == [3, 3]
    assert units.sum(axis=0) == pytest.approx(rows.sum(axis=0))
    assert units[0] == pytest.approx(rows[[0, 3, 6]].sum(axis=0))
    assert units[3:] == pytest.approx(rows[9:])
    rng = np.random.default_rng(0)
    w = bootstrap.replicate_weights(members, len(units), rng)
    # two repeats drawn with replacement, each drawn repeat's 3 units drawn 3 times: 6 draws in all
    assert w.sum() == 6 and (w >= 0).all()


def test_prediction_with_the_speculative_arms_own_batch():
    # B_0 = 8 without speculation, B = 6 with it; dbar 1.5 is the batch's (the mix's) drafts per request
    cost = StepCost((10.0, 2.0, 0.5), (1.0, 0.25, 0.0))
    out = predict(np.array([1.0, 2.0]), np.array([0.0, 1.5]), cost, batch=8, spec_batch=6)
    step = [10 + 16, 10 + 12 + 0.5 * 6 * 1.5 + 1 + 0.25 * 6]
    assert out["step_ms"] == pytest.approx(step)
    assert out["speedup"] == pytest.approx([1.0, 2.0 * step[0] / step[1]])
    assert out["system_tokens_per_s"] == pytest.approx([8 * 1000 / step[0], 6 * 2000 / step[1]])
