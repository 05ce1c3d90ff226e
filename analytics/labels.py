"""The verdict rule: a label for every speedup interval, from the interval
alone, with a practical margin declared before the run and a step-down
correction over the run's family of labels that counts how its rows move
together. The one place the rule is written; the
``speedup`` and ``speedup_natural_end`` marts read the labels computed here
(``intervals.fill``), and ``benchmarks/calibration.py`` calls the same code.

**The rule** (delta = the run's margin, ``--margin``, default 0.05, recorded
in the manifest before the run):

- ``faster``: the family-wise interval (below) lies wholly above 1.
  ``clears_margin`` says whether it also lies above 1 + delta (a gain of at
  least the margin);
- ``slower``: the family-wise interval lies wholly below 1; ``clears_margin``:
  below 1 / (1 + delta);
- ``equivalent``: neither, and the row's 90% interval (1 - 2 alpha: two
  one-sided tests at alpha = 5%, TOST) lies inside [1 / (1 + delta), 1 +
  delta]: any effect is smaller than the margin;
- ``inconclusive``: anything else: this run cannot tell effects of about
  ``detectable_effect`` from none, and ``repeats_needed`` says how many
  repeats would resolve +-delta.

**Error rates.** faster / slower: family-wise 5% (Holm, below) over the
run's labels. equivalent: each label at 5% (a true effect at the margin reads
``equivalent`` in at most 5% of runs), and the claim "every row of the family
is equivalent" also at 5%: it is an intersection-union test, which needs no
correction for the number of rows (Berger 1982). Read at Holm's level
instead (before issue 41: about 99.6% for the demo's 12 rows), a true 1.00x
read ``equivalent`` in 0.2% of rows under A/A; at 90% it is reachable: how
often, at the demo's noise, BENCHMARKS.md (``benchmarks/calibration.py``).

So a label never contradicts its interval: an interval wholly below 1 is
``slower``, wholly above 1 ``faster``, whatever the calibration check beside
the verdict says (``fit.py``: whether one variance per category fits every
level; not a second hurdle).

**Multiplicity (step-down max-|z|).** A run has many labels (categories x
levels, and ``(system)``); at 95% each, a run with no effect anywhere would
show some label other than ``equivalent``/``inconclusive`` in about
1 - 0.95^m of runs. The family is every labelled row of the run in one mart.
Each row's t statistic against a ratio of 1 becomes a z score (the normal
value with the same tail, ``z_score``); the rows are ranked by |z|, and the
i-th is rejected when every row before it was and its |z| exceeds the 95%
quantile of the largest |Z| among the rows not yet rejected, Z the rows'
joint null distribution (``step_down_levels``). Rows of different categories
at one level are sent in the same blocks and share those blocks' noise, so
they move together: the joint distribution correlates them as their series'
residuals do (``variance.residual_correlation``; 0.83-0.97 at its bound
between the categories and (system) of three demo-design runs on this machine),
rows at different levels as independent (they share only the repeat's
server process: counted as independent, the conservative side). The largest
of 12 rows that move together in fours (a level's three categories and
(system)) is smaller than the largest
of 12 independent ones, so the intervals are narrower than Holm's (which
assumes nothing about the dependence) at the same family-wise error rate:
at the demo's design and noise, a 1.20x effect in one category is labelled
``faster`` in 82% of its rows against 73% counted independent (BENCHMARKS.md). Each
row's interval is drawn at the level whose two-sided quantile is its step's
critical value, and the rows from the first one not rejected on keep that
step's level, so an interval excludes 1 exactly when its row is rejected, the
labels ``faster``/``slower`` keep the family-wise error rate at alpha (5%:
simulated 1.8-5.7% over noise it does not assume, 5.05% where it fits),
and each interval is still the one its label reads. With no correlation the
procedure is Sidak's step-down, a hair narrower than Holm's. Every row also
keeps its plain 95% interval (``pointwise``). The sequential design's looks
keep Holm over their open cells (``sequential``), the compatibility matrix's
speed cells Holm over a pair's cells; the calibration check (``fit.py``) Holm
over the levels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypeVar

import numpy as np

from specdec.analytics.variance import t_interval, t_sf
from specdec.schemas.records import DEFAULT_MARGIN  # the manifest's default margin, defined once

__all__ = [
    "ALPHA",
    "DEFAULT_MARGIN",
    "LABELS",
    "RULE",
    "RULE_SHORT",
    "Judged",
    "holm_levels",
    "judge",
    "label_of",
    "step_down_levels",
    "z_score",
]

ALPHA = 0.05
_NORMAL = NormalDist()
K = TypeVar("K", bound=Hashable)
_MAX_REPEATS = 100  # repeats_needed says 101 for "more than this"
LABELS = ("faster", "slower", "equivalent", "inconclusive")

#: The rule in one paragraph, for the report, the data dictionary and the marts' readers.
RULE = (
    "Labels read the family-wise interval (a step-down over the run's labels that counts how rows at a level "
    "move together, family-wise error rate 5%) and the "
    "run's margin delta, declared before the run (--margin, default 5%): faster = the interval lies above 1 "
    "(clears_margin: above 1 + delta); slower = below 1 (clears_margin: below 1 / (1 + delta)); equivalent = "
    "neither, and the row's 90% interval (two one-sided tests at 5%) lies inside [1 / (1 + delta), 1 + delta] "
    "(5% per label, and 5% for the claim that every row is); inconclusive = otherwise, with the smallest "
    "effect the run could "
    "tell from none (detectable_effect) and the repeats that would resolve +-delta (repeats_needed). The "
    "calibration check (noise_check: does one variance per category fit every level?) is shown beside the "
    "verdict, not a second hurdle."
)

#: The same in one line, for the terminal.
RULE_SHORT = (
    "family-wise intervals (step-down, 5% family-wise error rate) against 1 and the run's margin: faster / "
    "slower = the interval clears 1; equivalent = the 90% interval inside the margin (TOST); inconclusive = "
    "neither"
)


def label_of(ci_low: float, ci_high: float, margin: float) -> tuple[str, bool | None]:
    """(label, clears_margin) of one interval; clears_margin is None for
    ``equivalent`` and ``inconclusive``."""
    if ci_low > 1.0:
        return "faster", ci_low > 1.0 + margin
    if ci_high < 1.0:
        return "slower", ci_high < 1.0 / (1.0 + margin)
    if ci_low >= 1.0 / (1.0 + margin) and ci_high <= 1.0 + margin:
        return "equivalent", None
    return "inconclusive", None


def bound_text(v: float, digits: int = 2) -> str:
    """An interval bound as text that stays on its side of 1: 0.998 is '0.998',
    not '1.00' (an interval labelled ``slower`` must not read as if it touched
    1); 2 decimals unless rounding would land on 1.00, up to 4."""
    for d in range(digits, 5):
        text = f"{v:.{d}f}"
        if v == 1.0 or float(text) != 1.0:
            return text
    return f"{v:.4f}"


def bounds_text(low: float, high: float) -> str:
    """'0.95-0.998': an interval's bounds, each by ``bound_text``."""
    return f"{bound_text(low)}-{bound_text(high)}"


#: Draws of the rows' joint null distribution that ``step_down_levels`` reads its critical values
#: from: the 95% quantile of a maximum then has a Monte Carlo error of about 0.15 points of
#: coverage; the seed is fixed, so a build gives the same levels every time.
DRAWS = 20_000


def z_score(centre: float, se: float, df: float) -> float:
    """The row's t statistic (centre / se on ``df``) as the standard normal value with the same
    one-sided tail: rows on different df become comparable in one joint distribution."""
    if se <= 0:
        return 0.0 if centre == 0 else math.copysign(40.0, centre)
    tail = t_sf(abs(centre) / se, df)
    z = 40.0 if tail <= 0 else -_NORMAL.inv_cdf(min(tail, 0.5))
    return math.copysign(z, centre)


def step_down_levels(
    z: Mapping[K, float],
    correlation: Callable[[K, K], float],
    alpha: float = ALPHA,
    draws: int = DRAWS,
) -> dict[K, float]:
    """Per key, the confidence level of its family-wise interval under the step-down max-|z|
    procedure (Romano and Wolf 2005; Westfall and Young's step-down with the joint distribution
    given instead of resampled): the rows ranked by |z|, the i-th is rejected when every row before
    it was and its |z| exceeds the 1 - alpha quantile of max |Z| over the rows not yet rejected
    (itself and those after it), Z standard normal with ``correlation(a, b)`` between rows (the
    rows' null distribution, ``z_score``). Its interval is drawn at the level whose two-sided
    quantile is that critical value, so it excludes 1 exactly when the row is rejected; the rows
    from the first one not rejected on keep that step's level (as ``holm_levels``). With every
    correlation 0 this is Sidak's step-down, a hair narrower than Holm's; where rows move together
    (the categories of one block) the maximum is smaller than for independent rows and so are the
    intervals, with the family-wise error rate still at ``alpha``. A correlation matrix that is not
    positive semi-definite (estimated pairwise) is replaced by the nearest one with a unit
    diagonal (eigenvalues clipped at 0)."""
    keys = sorted(z, key=lambda k: (-abs(z[k]), str(k)))
    m = len(keys)
    if m == 0:
        return {}
    corr = np.eye(m)
    for i in range(m):
        for j in range(i + 1, m):
            corr[i, j] = corr[j, i] = max(-1.0, min(1.0, correlation(keys[i], keys[j])))
    # rows correlated with no other row are exact (|Z| <= c with probability 2 Phi(c) - 1); each group
    # of correlated rows (a level's categories) has the distribution of its maximum drawn, and the
    # groups are independent, so P(max <= c) is the product over the groups
    groups = _components(corr)
    rng = np.random.default_rng(20261207)
    drawn: dict[int, tuple[list[int], np.ndarray]] = {}
    for g, members in enumerate(groups):
        if len(members) > 1:
            sub = corr[np.ix_(members, members)]
            values, vectors = np.linalg.eigh(sub)
            factor = vectors * np.sqrt(np.clip(values, 0.0, None))
            factor /= np.linalg.norm(factor, axis=1, keepdims=True)  # unit variances again
            drawn[g] = (members, np.abs(rng.standard_normal((draws, len(members))) @ factor.T))
    cache: dict[tuple[int, ...], np.ndarray] = {}
    critical = [_critical(i, groups, drawn, alpha, cache) for i in range(m)]
    out: dict[K, float] = {}
    failed_at: float | None = None
    for i, key in enumerate(keys):
        level = 2.0 * _NORMAL.cdf(float(critical[i])) - 1.0
        if failed_at is None and not abs(z[key]) > critical[i]:
            failed_at = level
        out[key] = failed_at if failed_at is not None else level
    return out


def _components(corr: np.ndarray) -> list[list[int]]:
    """The groups of rows linked by a nonzero correlation (connected components), each in order."""
    m = len(corr)
    parent = list(range(m))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(m):
        for j in range(i + 1, m):
            if corr[i, j] != 0.0:
                parent[root(i)] = root(j)
    out: dict[int, list[int]] = {}
    for i in range(m):
        out.setdefault(root(i), []).append(i)
    return list(out.values())


def _critical(
    step: int,
    groups: list[list[int]],
    drawn: Mapping[int, tuple[list[int], np.ndarray]],
    alpha: float,
    cache: dict[tuple[int, ...], np.ndarray],
) -> float:
    """The 1 - alpha quantile of the largest |Z| over the rows ``step``.. (those not yet rejected;
    rows are indexed by rank): the c where the product over the groups of P(max over the group's
    rows still in play <= c) is 1 - alpha, by bisection. ``cache``: a group's sorted maxima per set
    of rows still in play (a group changes only when one of its own rows is passed)."""
    exact = 0
    maxima: list[np.ndarray] = []
    for g, members in enumerate(groups):
        live = tuple(i for i in members if i >= step)
        if not live:
            continue
        if len(live) == 1:
            exact += 1  # a row correlated with none still in play: exact
            continue
        if live not in cache:
            cols, draws_abs = drawn[g]
            cache[live] = np.sort(draws_abs[:, [cols.index(i) for i in live]].max(axis=1))
        maxima.append(cache[live])

    searches = [(sorted_max.searchsorted, len(sorted_max)) for sorted_max in maxima]

    def below(c: float) -> float:
        p = math.erf(c / math.sqrt(2.0)) ** exact  # P(|Z| <= c) for each exact row
        for search, n in searches:
            p *= int(search(c, side="right")) / n
        return p

    lo, hi = 0.0, 12.0
    for _ in range(40):  # to 1e-11: far inside the Monte Carlo error
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if below(mid) < 1.0 - alpha else (lo, mid)
    return hi


def holm_levels(p_values: Mapping[Hashable, float], alpha: float = ALPHA) -> dict[Hashable, float]:
    """Per key, the confidence level of its interval under Holm's step-down
    procedure (see the module docstring): the interval at that level excludes
    the null exactly when Holm rejects it. Ties in p are ranked by key order
    (the same level either way)."""
    m = len(p_values)
    order = sorted(p_values, key=lambda k: (p_values[k], str(k)))
    out: dict[Hashable, float] = {}
    failed_at: float | None = None
    for i, key in enumerate(order):
        level = 1.0 - alpha / (m - i)
        if failed_at is None and not p_values[key] <= alpha / (m - i):
            failed_at = level
        out[key] = failed_at if failed_at is not None else level
    return out


@dataclass(frozen=True)
class Judged:
    """One labelled row: its family-wise interval and label."""

    ci_low: float
    ci_high: float
    level: float
    label: str
    clears_margin: bool | None
    detectable_effect: float  # the effect (as a share: 0.12 = 12%) the run could tell from none
    repeats_needed: int | None  # repeats that would resolve +-margin; None when already resolved
    tost_low: float = math.nan  # the 1 - 2 alpha interval equivalence reads (two one-sided tests)
    tost_high: float = math.nan


def judge(
    centre: float,
    se: float,
    df: float,
    level: float,
    margin: float,
    repeats: int,
    df_at: Callable[[int], float] | None = None,
    tost_alpha: float = ALPHA,
) -> Judged:
    """Label one row from its log-scale centre, standard error and df at the
    family-wise ``level``. ``df_at(n)``: the df that n repeats would give
    (default: df grows in proportion to repeats - 1), for ``repeats_needed``:
    the fewest repeats (up to 100) whose interval would be no wider than
    ln(1 + margin) / 2 at this level, so that a true ratio of 1 would read
    ``equivalent`` and one of 1 + margin ``faster`` about half the time or more. ``tost_alpha``: each
    one-sided test's level for ``equivalent`` (5%; a sequential look spends less: ``sequential``)."""
    low, high, half = t_interval(centre, se, df, level)
    label, clears = label_of(low, high, margin)
    tost_low, tost_high, _half = t_interval(centre, se, df, 1.0 - 2.0 * tost_alpha)
    if label not in ("faster", "slower"):
        inside = tost_low >= 1.0 / (1.0 + margin) and tost_high <= 1.0 + margin
        label = "equivalent" if inside else "inconclusive"
    needed = None
    if label == "inconclusive":
        per_block_sd = se * math.sqrt(repeats)
        df_of = df_at or (lambda n: df * (n - 1) / max(repeats - 1, 1))
        target = math.log1p(margin) / 2
        tail = (1 - level) / 2

        def fits(n: int) -> bool:
            """Whether n repeats' interval is no wider than ``target``: t_quantile(1 - tail, df) *
            sd / sqrt(n) <= target, asked as the t tail beyond target * sqrt(n) / sd (one
            evaluation of the t distribution instead of a quantile's search: the same answer,
            the CDF being increasing)."""
            if per_block_sd <= 0:
                return True
            return t_sf(target * math.sqrt(n) / per_block_sd, df_of(n)) <= tail

        lo, hi = repeats + 1, _MAX_REPEATS + 1  # the width falls as n grows: bisect for the first n that fits
        if not fits(_MAX_REPEATS):
            needed = hi
        else:
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
            needed = lo
    return Judged(low, high, level, label, clears, math.expm1(min(half, 700.0)), needed, tost_low, tost_high)
