"""The noise of a block figure, from the run itself: variance components and
the degrees of freedom the run's design supports.

A block figure is one number per (level, repeat) of one series (a category's
mean log ratio over its pairs, or ``(system)``'s block throughput log ratio).
On the log scale it is modelled as

    y[l, r] = mu[l] + a[r] + w[l, r]

- ``mu[l]`` fixed: the effect at level l (what the interval is for);
- ``a[r]`` ~ N(0, s2_repeat): noise shared by every level of repeat r. With
  fresh servers per repeat (the embedded default) the levels of a repeat run
  on one pair of server processes, and a vLLM process has a speed of its own
  (12% apart between two processes on this machine); with one server for the
  whole run it is whatever drifts between repeats;
- ``w[l, r]`` ~ N(0, s2_block): noise of the block itself (host noise during
  the block, and the request noise averaged over the block's pairs).

The interval for ``mu[l]`` needs V = s2_repeat + s2_block, the variance of
one block figure, over ``R_l``: Var(mean_r y[l, r]) = V / R_l.

**Estimate (method of moments).** Q1 = the sum of squared residuals about each
level's mean, over the levels with 2 or more repeats; E[Q1] = k1 * V with k1 =
sum_l (R_l - 1), balanced or not, so V = Q1 / k1 is unbiased whatever the
split between the two components. The split matters for the degrees of
freedom only, and comes from a second quadratic form, Q2 = sum_r (sum_l
residual[l, r])^2 (residuals of one repeat added up: large when repeats move
every level together), whose expectation is s2_repeat * tr((MS)^2) + s2_block
* k1 (M: the within-level centring, S: 1 where two cells share a repeat).
The two equations give both components; a negative one is set to 0 and the
other takes all of V.

**Degrees of freedom (Satterthwaite).** V is a quadratic form y'Ay / k1 of
Gaussian figures with covariance Sigma = s2_repeat * S + s2_block * I, so
Var(y'Ay) = 2 tr((A Sigma)^2), and the chi-square with the same first two
moments has df = tr(A Sigma)^2 / tr((A Sigma)^2). When the repeats carry no
shared noise, df = k1 (every residual independent: sum over levels of R_l - 1,
what the previous method counted); when they carry all of it, df = R - 1
however many levels there are (the levels of one repeat then say the same
thing L times). The previous method counted k1 in both cases, which
under-covered by 6-17% at per-process shifts of 3-10%.

**A pessimistic split for the df.** Sigma must be estimated, and with 2-5
repeats the repeat stratum's mean square has 1-4 degrees of freedom: by chance
it is often small, which would make the df large exactly when the interval is
already too narrow (simulated at a 10% process shift and 3 repeats: 90-92%
coverage with the plain plug-in). So the df is computed with s2_repeat at the
upper end of its one-sided 75% confidence bound (the repeat stratum's mean
square MS_R, of R - 1 df, divided by chi2(0.25, R - 1) / (R - 1)), and s2_block
as estimated. V itself stays the unbiased estimate. Calibrated in
``benchmarks/calibration.py``: 94-96% coverage at process shifts of 0-10% with
3 repeats (BENCHMARKS.md).

Each series is estimated on its own (per category: no pooling across
categories). Pooling would assume every category has the same request noise,
which the demo's chat (2-3x the others) contradicts, and it would add no
degree of freedom to the repeat component, which has R - 1 whatever is
pooled.

**The model the intervals use (issue 41, item 2): ``level_noise``.** The
above, with three changes, each because the runs showed the simple model
wrong:

- *the arm order as a fixed effect*: y[l, r] = mu[l] + g * o[l, r] + a[r] +
  w[l, r], o = +1/2 where the speculative arm's block ran second, -1/2 where
  it ran first. The demo run of 2026-12-06 had the second block of a pair
  3-6% slower in every series, and with 5 repeats a level has one arm first
  3 times (the schedule alternates which arm that is between levels, so the
  run is balanced, a level is not). mu[l] is the effect with the order
  averaged out; g costs one residual degree of freedom;
- *a block variance per level where the run says so*: w[l, r] has one
  variance for the levels pooled together and one of its own for each level
  the pooling test sets apart (``intervals.POOL_ALPHA``: the calibration
  check's one-sided p-value for that level, ``fit.py``, at most 10%, on the
  figures with or without the slow blocks below). A level of its own has its
  se^2 from its own residuals (about R - 1 df); pooled levels share V (df by
  Satterthwaite with the pessimistic split, as above, from their own cells);
  the fixed effects are refitted weighted by 1 / V so that a noisier level's
  noise does not reach the others through the order effect;
- *slow blocks and heavy tails* (``slow_blocks``): a block figure far from its
  level's others, where half of the family's series agree, is a slow block.
  The calibration check reads the figures without it (one stalled block is
  not a noisier level) and the pooling test both with and without, so the
  level gets a variance of its own and keeps the block: it widens that
  level's interval, and no other's. Set aside instead, it left intervals too
  narrow where tails are heavy (7.7% of simulated A/A runs with a false label
  against 2-3% keeping it). Heavy tails short of that stay in too: the t
  interval's df absorbs them. Simulated with t(3) block and request noise and
  with 4% of blocks 2-3x slow: ``benchmarks/calibration.py``, BENCHMARKS.md.

A level's se^2 = sum_j c_j^2 V[group of j], c the row of the fit that gives
mu[l] (1/R on its own cells when no order is fitted), V[group] by the method
of moments on the residuals (one group: its residual sum of squares over its
residual count): a quadratic form whose df is Satterthwaite's. Without an
order and with every level pooled it is ``block_noise``'s V / R and df
exactly (tests/analytics/test_level_noise.py).

Also here: Student's t (``t_quantile``, ``t_sf``), Fisher's F tail (``f_sf``) and Satterthwaite's df of a
sum of independent variance estimates (``satterthwaite``).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeVar

import numpy as np

__all__ = [
    "MAD_SD",
    "REPEAT_BOUND",
    "SLOW_K",
    "BlockNoise",
    "LevelNoise",
    "block_noise",
    "chi2_quantile",
    "f_sf",
    "level_noise",
    "satterthwaite",
    "slow_blocks",
    "t_interval",
    "t_quantile",
    "t_sf",
]

#: One-sided confidence of the pessimistic s2_repeat used for the df (see above).
REPEAT_BOUND = 0.75

Cell = tuple  # (level, repeat); a level may be any sortable key


@dataclass(frozen=True)
class BlockNoise:
    """The noise of one block figure of a series (log scale)."""

    variance: float  # V = repeat + block: the variance of one block figure
    df: float  # Satterthwaite's effective degrees of freedom of the estimate of V
    repeat: float  # s2_repeat, noise shared by every level of a repeat
    block: float  # s2_block, noise of one block alone
    k1: int  # sum over levels of (repeats - 1): the residual count


def block_noise(figures: Mapping[Cell, float], repeat_bound: float | None = REPEAT_BOUND) -> BlockNoise | None:
    """V, its components and its degrees of freedom from a series' block
    figures keyed by (level, repeat). None when no level has 2 repeats (no
    residual: nothing says how far a repeat moves)."""
    by_level: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (level, repeat), figure in figures.items():
        by_level[level].append((repeat, float(figure)))
    cells = [(lv, r, y) for lv in sorted(by_level) if len(by_level[lv]) >= 2 for r, y in sorted(by_level[lv])]
    if not cells:
        return None
    n = len(cells)
    level_ids = {lv: i for i, lv in enumerate(sorted(by_level))}  # any hashable level key
    levels = np.array([level_ids[c[0]] for c in cells])
    repeats = np.array([c[1] for c in cells])
    y = np.array([c[2] for c in cells])
    same_level = levels[:, None] == levels[None, :]
    m = np.eye(n) - same_level / same_level.sum(axis=1, keepdims=True)  # within-level centring
    s = (repeats[:, None] == repeats[None, :]).astype(float)
    k1 = int(round(np.trace(m)))
    resid = m @ y
    q1 = float(resid @ resid)
    v = q1 / k1
    ms = m @ s
    t_mss = float(np.trace(ms @ ms))
    q2 = float(resid @ s @ resid)
    # [k1, k1; t_mss, k1] [repeat; block] = [q1; q2]; singular with one level (S = I there)
    det = k1 * k1 - k1 * t_mss
    if abs(det) < 1e-9 * max(1.0, k1 * k1):
        repeat_var, block_var = 0.0, v
    else:
        repeat_var = (q2 - q1) / (t_mss - k1)
        block_var = v - repeat_var
        if repeat_var < 0:
            repeat_var, block_var = 0.0, v
        elif block_var < 0:
            repeat_var, block_var = v, 0.0
    if v <= 0:
        return BlockNoise(0.0, float(k1), 0.0, 0.0, k1)
    n_repeats = len(set(repeats.tolist()))
    df_repeat_var = repeat_var
    if repeat_bound is not None and n_repeats >= 2 and t_mss > k1 * (1 + 1e-9):
        # the repeat stratum: E[MS_R] = s2_block + L_eff * s2_repeat (balanced: MS_R of R - 1 df)
        l_eff = t_mss / k1
        ms_r = q2 * k1 / (t_mss * (n_repeats - 1))
        upper = ms_r * (n_repeats - 1) / chi2_quantile(1 - repeat_bound, n_repeats - 1)
        df_repeat_var = max(repeat_var, (upper - block_var) / l_eff)
    a_sigma = m @ (df_repeat_var * s + block_var * np.eye(n))
    df = float(np.trace(a_sigma) ** 2 / np.trace(a_sigma @ a_sigma))
    return BlockNoise(v, df, repeat_var, block_var, k1)


def t_interval(centre: float, se: float, df: float, level: float) -> tuple[float, float, float]:
    """(low, high, half-width) of a two-sided t interval on the log scale, mapped back with exp."""
    half = t_quantile(1 - (1 - level) / 2, df) * se
    # clamped where exp would overflow (1 df at a level near 1: a t quantile in the thousands)
    return math.exp(max(centre - half, -700.0)), math.exp(min(centre + half, 700.0)), half


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of independent variance estimates, each
    (value, its df): (sum v)^2 / sum (v^2 / df). Terms with value 0 add nothing."""
    total = sum(v for v, _ in terms)
    denom = sum(v * v / df for v, df in terms if v > 0 and df > 0)
    return total * total / denom if denom > 0 else math.inf


def _gammainc(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x) (series below a + 1, else a continued fraction)."""
    if x <= 0:
        return 0.0
    front = math.exp(-x + a * math.log(x) - math.lgamma(a))
    if x < a + 1:
        term = total = 1.0 / a
        k = a
        for _ in range(500):
            k += 1
            term *= x / k
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return total * front
    tiny = 1e-300
    b, c, d = x + 1 - a, 1 / tiny, 1 / (x + 1 - a)
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return 1.0 - front * h


def chi2_quantile(p: float, df: float) -> float:
    """The p quantile of the chi-square with ``df`` degrees of freedom (bisection on P(df / 2, x / 2))."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"chi2_quantile: p={p}, df={df}")
    lo, hi = 0.0, max(1.0, df)
    while _gammainc(df / 2, hi / 2) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _gammainc(df / 2, mid / 2) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if d > tiny or d < -tiny else tiny)
    h = d
    for k in range(1, 300):
        k2 = 2 * k
        # the even step, then the odd one (written out: the same arithmetic in the same order)
        aa = k * (b - k) * x / ((qam + k2) * (a + k2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        c = c if c > tiny or c < -tiny else tiny
        h *= d * c
        aa = -(a + k) * (qab + k) * x / ((a + k2) * (qap + k2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        c = c if c > tiny or c < -tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F > f) for Fisher's F with (``df1``, ``df2``) degrees of freedom (> 0, may be fractional)."""
    if f <= 0.0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _betainc(df2 / 2.0, df1 / 2.0, df2 / (df2 + df1 * f))


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` (> 0, may be fractional or inf)."""
    if math.isinf(df):
        return 1.0 - NormalDist().cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    """Student's t density with ``df`` degrees of freedom."""
    return math.exp(
        math.lgamma((df + 1.0) / 2.0)
        - math.lgamma(df / 2.0)
        - 0.5 * math.log(df * math.pi)
        - (df + 1.0) / 2.0 * math.log1p(t * t / df)
    )


def _t_root(p: float, df: float) -> float | None:
    """The p (>= 0.5) quantile of Student's t by safeguarded Newton on the tail
    (``t_sf(x) = 1 - p``), to about 1e-12 relative; None if it does not settle."""
    tail, z = 1.0 - p, NormalDist().inv_cdf(p)
    x = max(z + (z**3 + z) / (4.0 * df), 1e-3)  # Cornish-Fisher's first term: a start near the root
    lo, hi = 0.0, math.inf
    for _ in range(60):
        g = t_sf(x, df) - tail  # > 0: x is below the root
        if g > 0:
            lo = x
        else:
            hi = x
        density = _t_pdf(x, df)
        step = g / density if density > 0 else math.inf
        nxt = x + step
        if not lo < nxt < hi:  # outside the bracket: bisect it (or widen it while it is open)
            nxt = (lo + hi) / 2.0 if math.isfinite(hi) else 2.0 * max(x, 1.0)
        if abs(nxt - x) <= 1e-12 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return None


#: Above this many degrees of freedom ``t_quantile`` evaluates every step: the CDF's own
#: rounding grows with df (lgamma of df / 2 loses digits: about 1e-8 at df = 1e7), and one
#: step in 20,000 at df 1e3-1e7 went the other way with a window of 1e-9.
_SHORTCUT_DF = 1e3


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom (bisection
    on the CDF through the regularized incomplete beta; checked against scipy
    in the tests). ``df`` = inf gives the normal quantile. Remembered per (p, df):
    a build asks for the same ones again and again (a lake of 200 runs: 17,582 calls,
    15.6 s of bisection; 5,113 distinct, 5.7 s).

    The bisection is decided step by step as always, but a step whose midpoint lies
    more than 1e-9 (relative) from the root found first by Newton's method
    (``_t_root``, a few evaluations) is decided by that root instead of by an
    evaluation of the CDF: the CDF there is farther from p than its rounding error by
    orders of magnitude (for df up to ``_SHORTCUT_DF``), so the step goes the same way,
    and the result is the plain bisection's to the last bit (tests/analytics/test_variance.py)
    with about a third of its evaluations (47 -> 9-18 per quantile)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: p={p}, df={df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    root = _t_root(p, df) if df <= _SHORTCUT_DF else None
    near = 1e-9 * max(1.0, root) if root is not None else math.inf

    def below(x: float) -> bool:  # 1 - t_sf(x) < p: x lies below the p quantile
        if root is not None and abs(x - root) > near:
            return x < root
        return 1.0 - t_sf(x, df) < p

    lo, hi = 0.0, 1.0
    while below(hi):
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if below(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# ---------------------------------------------------------------------------------------------
# Issue 41, item 2: a variance per level where the run says so, the arm order as a fixed effect.


@dataclass(frozen=True)
class LevelNoise:
    """The noise of one level's estimated effect in a series (log scale)."""

    centre: float  # the level's effect, the arm order's effect removed (the mean of both orders)
    se: float  # its standard error
    df: float  # Satterthwaite's df of se^2
    repeats: int  # block figures used at this level
    own: bool  # the level has a block variance of its own (not pooled with the other levels)
    order: float | None  # the series' order effect (log scale: speculative second minus first), None if not fitted


def _fit(x: np.ndarray, y: np.ndarray, groups: list, weights: np.ndarray) -> tuple:
    """Weighted least squares of y on x, and per variance group its V from the residuals: the
    solution of E[e' D_G e] = sum_h V_h tr(M' D_G M D_h) (one group: its residual sum of squares
    over its residual count, unbiased for the total variance of one block figure, repeat-shared
    part included, as in ``block_noise``). Returns (P, beta, M, e, V per group, the groups'
    forms M' D_G M, their matrix of traces)."""
    n = len(y)
    root = np.sqrt(weights)
    p = np.linalg.pinv(x * root[:, None]) * root[None, :]
    beta = p @ y
    m = np.eye(n) - x @ p
    e = m @ y
    e[np.abs(e) < 1e-12 * max(1.0, float(np.abs(y).max()))] = 0.0  # rounding, not noise: figures that do not move
    diag = [np.diag(g.astype(float)) for g in groups]
    forms = [m.T @ d @ m for d in diag]
    a_v = np.array([[float(np.trace(f @ d)) for d in diag] for f in forms])
    q = np.array([float(e @ d @ e) for d in diag])
    v = np.linalg.lstsq(a_v, q, rcond=None)[0] if a_v.size else np.zeros(0)
    # a group whose joint solution is not positive while its residuals move (a noisier group's residuals
    # leak into its equation through the shared order effect): its own residuals over its own count, which
    # keep that leak (wider, never 0). At 0 every interval of the group had no width: 6% of the cells, and
    # 19% of A/A runs with a false label, at 4 repeats with 4% of blocks slow (issue 41, 2026-12-06)
    v = [float(x_) if x_ > 0 or a_v[g, g] <= 0 else max(float(q[g] / a_v[g, g]), 0.0) for g, x_ in enumerate(v)]
    return p, beta, m, e, v, forms, a_v


def _solve_components(a: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta >= 0 with a[:, act] theta[act] = q[act] on the active set: a component whose
    moment estimate is negative is set to 0 and the rest solved again. Returns (theta, active)."""
    active = np.ones(len(q), dtype=bool)
    theta = np.zeros(len(q))
    while active.any():
        idx = np.flatnonzero(active)
        sol = np.linalg.lstsq(a[np.ix_(idx, idx)], q[idx], rcond=None)[0]
        if (sol >= 0).all():
            theta[idx] = sol
            break
        active[idx[int(np.argmin(sol))]] = False
    return theta, active


def level_noise(
    figures: Mapping[Cell, float],
    order: Mapping[Cell, float] | None = None,
    own_levels: frozenset = frozenset(),
    repeat_bound: float | None = REPEAT_BOUND,
) -> dict:
    """Per level of one series: its effect, standard error and df, from the block figures
    keyed by (level, repeat).

    Model: y[l, r] = mu[l] + g * o[l, r] + a[r] + w[l, r], with o = +1/2 where the
    speculative arm ran second in that block and -1/2 where it ran first (``order``; 0 or
    absent: unknown), a[r] ~ (0, s2_repeat) shared by the levels of a repeat and w[l, r] ~
    (0, s2_block[l]): one block variance for the pooled levels, one of its own for each level
    in ``own_levels`` (the levels the homogeneity check set apart). Fixed effects by least
    squares, weighted by 1 / V of each cell's variance group where there are several (a second
    pass: the order effect, common to the levels, must not carry a noisier level's noise into the
    others); each group's V by the method of moments on the residuals (``_fit``); the level's
    se^2 = sum_j c_j^2 V[group of j] (c: the row of the fit that gives mu[l]); its df by
    Satterthwaite, Sigma split into the repeat-shared part and the groups' own by the method of
    moments (the residuals' repeat sums), s2_repeat at the upper end of its one-sided 75% bound
    (``REPEAT_BOUND``, as in
    ``block_noise``). Levels with fewer than 2 figures are left out. Empty when no residual
    degree of freedom is left."""
    cells = sorted(((lv, r), float(y)) for (lv, r), y in figures.items())
    counts: dict = defaultdict(int)
    for (lv, _r), _y in cells:
        counts[lv] += 1
    cells = [c for c in cells if counts[c[0][0]] >= 2]
    levels = sorted({c[0][0] for c in cells})
    if not levels:
        return {}
    n = len(cells)
    y = np.array([c[1] for c in cells])
    lev = np.array([levels.index(c[0][0]) for c in cells])
    rep_keys = sorted({c[0][1] for c in cells})
    rep = np.array([rep_keys.index(c[0][1]) for c in cells])
    o = np.array([float((order or {}).get(c[0], 0.0)) for c in cells])
    x = (lev[:, None] == np.arange(len(levels))[None, :]).astype(float)
    fitted_order = False
    if np.abs(o).sum() > 0:
        xo = np.column_stack([x, o])
        if np.linalg.matrix_rank(xo) == xo.shape[1] and n - xo.shape[1] >= 2:
            x, fitted_order = xo, True
    if n - x.shape[1] < 1:
        return {}
    s = (rep[:, None] == rep[None, :]).astype(float)
    own = [i for i, lv in enumerate(levels) if lv in own_levels]
    groups = [lev == i for i in own]
    rest = ~np.isin(lev, own)
    if rest.any():
        groups.append(rest)
    group_of = np.zeros(n, dtype=int)
    for gi, g in enumerate(groups):
        group_of[g] = gi
    p, beta, m, e, v_group, group_forms, a_v = _fit(x, y, groups, np.ones(n))
    if fitted_order and len(groups) > 1 and min(v_group) > 0:
        # the order effect is common to the levels: weighted by 1 / V of each cell's group, so a noisier
        # level does not carry its noise into the others' residuals through it
        p, beta, m, e, v_group, group_forms, a_v = _fit(x, y, groups, 1.0 / np.array(v_group)[group_of])
    # Sigma for the df: per variance group, its split between the repeat-shared part and its own
    # (method of moments on the group's residuals and their repeat sums; the shared part at the upper
    # end of its one-sided REPEAT_BOUND bound, as in ``block_noise``); each group on its own cells, so
    # a noisier level does not move the others' df
    sigma_df = np.zeros((n, n))
    for g in groups:
        comps = [np.diag(g.astype(float))]
        g_reps = len(set(rep[g].tolist()))
        with_repeat = g_reps >= 2 and len(set(lev[g].tolist())) >= 2
        if with_repeat:
            comps = [s * np.outer(g, g), *comps]
        forms = [m.T @ c @ m for c in comps]  # e' C e = y' M' C M y
        a = np.array([[float(np.trace(f @ c)) for c in comps] for f in forms])
        q = np.array([float(e @ c @ e) for c in comps])
        theta, active = _solve_components(a, q)
        if with_repeat and repeat_bound is not None and active[0] and a[0, 0] > 0:
            q_up = q[0] * (g_reps - 1) / chi2_quantile(1 - repeat_bound, g_reps - 1)
            theta[0] = max(theta[0], (q_up - float(a[0, 1:] @ theta[1:])) / a[0, 0])
        sigma_df += sum(t * c for t, c in zip(theta, comps))
    a_inv = np.linalg.pinv(a_v)
    out = {}
    for i, lv in enumerate(levels):
        c2 = p[i] ** 2  # the level's effect is c' y: its variance sum_j c_j^2 V[group of j]
        weights = np.array([float(c2[group_of == gi].sum()) for gi in range(len(groups))])
        var = float(weights @ np.array(v_group))
        coef = np.maximum(weights @ a_inv, 0.0)  # var ~ sum_k coef_k e' F_k e (a negative leak left out)
        wmat = sum(cf * f for cf, f in zip(coef, group_forms))
        ws = wmat @ sigma_df
        tr2 = float(np.trace(ws @ ws))
        df = float(np.trace(ws) ** 2 / tr2) if tr2 > 0 else float(n - x.shape[1])  # no spread: the residual count
        out[lv] = LevelNoise(
            float(beta[i]),
            math.sqrt(max(var, 0.0)),
            df,
            int((lev == i).sum()),
            lv in own_levels,
            float(beta[-1]) if fitted_order else None,
        )
    return out


#: A block figure this many SDs from the mean of its level's other figures is a slow block candidate.
SLOW_K = 5.0
MAD_SD = 1.4826  # the MAD of a normal sample, in SDs


def slow_blocks(figures: Mapping[Cell, float], k: float = SLOW_K) -> set:
    """The cells (level, repeat) of a series whose block figure looks like a slow block: a
    block that ran 2-3x slow (one arm, a stall of the host) moves the figure by ln 2-ln 3, 5-15
    SDs of this machine's block noise, and would both shift its level's mean and inflate the
    variance. A figure is a candidate when it lies more than ``k`` SDs from the mean of its
    level's other figures, the farthest of those left out (two slow blocks at one level must not
    hide each other); the SD is the larger of the series' robust SD (1.4826 x the median absolute
    deviation from each level's median, the median cell of an odd level, 0 by construction, left
    out) and the SD of those other figures (a level noisier than the others keeps its own
    spread). Only at levels with 4 figures or more, and at most all but 3 of a level. ``intervals``
    takes a block for slow where at least half of a family's series call it a candidate (a slow
    block slows every category of it). Simulated on one series of 3 levels x 5 repeats of normal figures
    (3,000 each, before the vote): a candidate in 2.0% of series, in 18.5% with one level 3x
    noisier, in 13.8% with t(3) figures; a figure 8.3 SDs off (a 2x slow block at the demo's
    noise) found in 87%, two of them at one level both in 58%."""
    by_level: dict = defaultdict(dict)
    for (lv, r), y in figures.items():
        by_level[lv][r] = float(y)
    devs = [y - float(np.median(list(reps.values()))) for reps in by_level.values() for y in reps.values()]
    nonzero = [abs(v) for v in devs if v != 0.0]
    pooled = MAD_SD * float(np.median(nonzero)) if nonzero else 0.0
    out: set = set()
    for lv, reps in by_level.items():
        if len(reps) < 4:
            continue
        far = []
        for r, y in reps.items():
            others = np.array([v for rr, v in reps.items() if rr != r])
            if len(others) >= 4:  # leave out the farthest of the others from their median
                others = np.delete(others, int(np.argmax(np.abs(others - np.median(others)))))
            sd = max(pooled, float(np.std(others, ddof=1)))
            dist = abs(y - float(np.mean(others)))
            if sd > 0 and dist > k * sd:
                far.append((dist / sd, r))
        out |= {(lv, r) for _d, r in sorted(far, reverse=True)[: len(reps) - 3]}
    return out


S = TypeVar("S", bound=Hashable)  # a series' key

#: The fewest residual df (shared cells less a mean per level and the order slope) for two series'
#: correlation to be read at all (fewer: 0, counted as independent).
MIN_CORRELATION_DF = 4
#: The correlation is read at this one-sided lower confidence bound of its size (Fisher's z, in
#: standard errors: 0.674, the 75% bound, as the df's pessimistic split above): a correlation
#: overestimated by chance would make the family-wise intervals too narrow, one underestimated only
#: costs power. Simulated on the demo's design and measured noise (1,000 A/A runs each, 500 at 1.20x;
#: a one-off comparison, 2026-12-07): false labels 2.9% / 3.5% (plain / t(3)) and power 80.3% at this
#: bound, 3.0% / 3.7% and 81.5% reading the estimate as it is, 2.8% / 3.2% and 78.5% at the 90% bound.
CORRELATION_BOUND_Z = 0.674


def _lower_bound(rho: float, dof: int, z: float) -> float:
    """|rho| at its one-sided lower confidence bound (Fisher's z, se 1 / sqrt(dof - 2)), sign kept;
    0 where the bound reaches 0 or the df are fewer than ``MIN_CORRELATION_DF``; ``z`` 0: as estimated."""
    if dof < MIN_CORRELATION_DF:
        return 0.0
    if z <= 0:
        return rho
    size = math.atanh(min(abs(rho), 0.999999)) - z / math.sqrt(dof - 2)
    return math.copysign(math.tanh(size), rho) if size > 0 else 0.0


def residual_correlation(
    series: Mapping[S, Mapping[Cell, float]],
    order: Mapping[Cell, float],
    bound_z: float = CORRELATION_BOUND_Z,
) -> dict[tuple[S, S], float]:
    """Per pair of series, how their rows at one level move together: the correlation of their
    block figures' residuals over the cells (level, repeat) both hold, each series' residuals about
    its level means with its arm-order slope removed (as ``level_noise`` fits them). Two categories
    sent in one block share that block's noise (the host, the server process, the arm order): in
    the three fixed demo-design runs of 2026-12-07 (06:36-07:05 UTC, 5 repeats) the pairs of
    categories and (system) read 0.89-0.98 (0.83-0.97 at the bound below), which the family-wise
    levels (``labels.step_down_levels``) count. Pairs with fewer than ``MIN_CORRELATION_DF`` residual df, or
    a series without residual spread: 0 (counted as independent: the conservative side for a
    positive correlation). Each correlation is read at the lower end of its one-sided
    ``CORRELATION_BOUND_Z`` confidence bound (``bound_z``; 0 reads it as estimated)."""
    resid: dict[S, dict[Cell, float]] = {}
    for key, cells in series.items():
        by_level: dict = defaultdict(list)
        for cell, y in cells.items():
            by_level[cell[0]].append((cell, float(y), order.get(cell, 0.0)))
        e: dict[Cell, tuple[float, float]] = {}
        for rows in by_level.values():
            if len(rows) < 2:
                continue
            my = sum(y for _c, y, _o in rows) / len(rows)
            mo = sum(o for _c, _y, o in rows) / len(rows)
            e.update({c: (y - my, o - mo) for c, y, o in rows})
        den = sum(o * o for _y, o in e.values())
        slope = sum(y * o for y, o in e.values()) / den if den > 0 else 0.0
        resid[key] = {c: y - slope * o for c, (y, o) in e.items()}
    out: dict[tuple[S, S], float] = {}
    keys = list(resid)
    for i, a in enumerate(keys):
        for b in keys[i:]:
            if a == b:
                out[a, a] = 1.0
                continue
            shared = resid[a].keys() & resid[b].keys()
            if not shared:
                rho = 0.0
            else:
                ea = np.array([resid[a][c] for c in sorted(shared)])
                eb = np.array([resid[b][c] for c in sorted(shared)])
                den = math.sqrt(float(ea @ ea) * float(eb @ eb))
                rho = float(ea @ eb) / den if den > 0 else 0.0
                # residual df: the shared cells less a mean per level and the order slope
                dof = len(shared) - len({c[0] for c in shared}) - 1
                rho = _lower_bound(rho, dof, bound_z)
            out[a, b] = out[b, a] = rho
    return out
