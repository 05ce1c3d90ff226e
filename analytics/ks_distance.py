"""The two-sample Kolmogorov-Smirnov distance, a descriptive figure of the
sampling check (``sampling_check.py``): D, the largest distance between two
empirical CDFs, its asymptotic p-value Q(sqrt(n m / (n + m)) D) (Q the
Kolmogorov distribution's survival function; conservative with ties), and the
critical D at a level alpha, c(alpha) sqrt((n + m) / (n m)) with
c(alpha) = sqrt(-ln(alpha / 2) / 2). The check's verdict rests on the
permutation test stratified by prompt (``permutation.py``), not on these.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["critical_d", "kolmogorov_sf", "ks_2samp"]


def ks_2samp(x, y) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic two-sided p-value)."""
    a, b = np.sort(np.asarray(x, dtype=float)), np.sort(np.asarray(y, dtype=float))
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one value")
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / n
    cdf_b = np.searchsorted(b, points, side="right") / m
    d = float(np.max(np.abs(cdf_a - cdf_b)))
    return d, kolmogorov_sf(math.sqrt(n * m / (n + m)) * d)


def kolmogorov_sf(x: float) -> float:
    """P(K > x) for the Kolmogorov distribution: 2 sum (-1)^(k-1) exp(-2 k^2 x^2)
    for x >= 1; for x < 1 the equivalent, faster-converging form
    1 - sqrt(2 pi) / x sum exp(-(2k - 1)^2 pi^2 / (8 x^2))."""
    if x <= 0:
        return 1.0
    k = np.arange(1, 101)
    if x >= 1:
        value = 2 * np.sum((-1.0) ** (k - 1) * np.exp(-2 * k**2 * x * x))
    else:
        value = 1 - math.sqrt(2 * math.pi) / x * np.sum(np.exp(-((2 * k - 1) ** 2) * math.pi**2 / (8 * x * x)))
    return float(min(1.0, max(0.0, value)))


def critical_d(n: int, m: int, alpha: float = 0.025) -> float:
    """The smallest D the KS test rejects at ``alpha``: c(alpha) sqrt((n + m) / (n m))."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))
