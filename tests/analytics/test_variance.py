"""``variance.t_quantile``: the bisection decided by Newton's root away from it gives the
plain bisection's result to the last bit (the intervals of a build are unchanged)."""

from __future__ import annotations

import math
import random

import pytest

from specdec.analytics import variance


def _plain_bisection(p: float, df: float) -> float:
    """t_quantile as it was: every step of the bisection evaluates the CDF."""
    if p < 0.5:
        return -_plain_bisection(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while 1.0 - variance.t_sf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - variance.t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _cases() -> list[tuple[float, float]]:
    rng = random.Random(21)
    holm = [(1 - 0.05 / (2 * k), df) for k in (1, 2, 3, 6, 20, 60, 200) for df in (0.3, 1, 1.5, 2, 4.7, 33.3, 999)]
    spread = [(rng.uniform(0.5, 0.99999), math.exp(rng.uniform(math.log(0.2), math.log(1e7)))) for _ in range(1500)]
    central = [(rng.uniform(0.5, 0.6), rng.uniform(100, 1e3)) for _ in range(500)]
    return holm + spread + central + [(0.025, 4.0), (0.5000001, 3.0), (0.975, 1e3), (0.975, 1001.0)]


def test_t_quantile_is_the_plain_bisection_to_the_last_bit():
    variance.t_quantile.cache_clear()
    differ = [(p, df) for p, df in _cases() if variance.t_quantile(p, df) != _plain_bisection(p, df)]
    assert differ == []


def test_t_quantile_evaluates_fewer_steps(monkeypatch):
    calls = []
    sf = variance.t_sf
    monkeypatch.setattr(variance, "t_sf", lambda t, df: calls.append(t) or sf(t, df))
    variance.t_quantile.cache_clear()
    assert variance.t_quantile(0.975, 4.0) == pytest.approx(2.7764451052, rel=1e-9)  # scipy.stats.t.ppf
    assert len(calls) < 20  # the plain bisection: 45
