"""The prediction interval of a measured speedup: the model's uncertainty about the expected
speedup plus the run-to-run noise of the measurement a replay would make.

A replay (``--validate``) measures the speedup mart's figure: the geometric mean of paired e2e
ratios, whose log is the mean over R repeats of a block figure (one per repeat). The speedup
mart's noise model (``analytics/intervals.py``, ``analytics/variance.py``) says one block figure
of a category varies with variance V = s2_repeat + s2_block (a shift shared by the repeat's
levels, the server process, plus the block's own noise), estimated from the run's own repeats
with Satterthwaite's df; its pointwise 95% interval is ``mean +- t(0.975, df) sqrt(V / R)``, so

    V = R * ((ln pointwise_ci_high - ln pointwise_ci_low) / (2 t(0.975, df)))^2

**The noise of the plan's sweep.** V and df of every analysis run of the planned run folder
(one per swept k > 0; a classic run has one), per category, pooled over those runs::

    V_c  = sum_k df_k V_k,c / sum_k df_k
    df_c = sum_k df_k,c / (1 + (m - 1) / 4)            m runs pooled

The runs of a sweep share the reference arm's blocks, so their estimates are not independent:
if the speculative and the reference blocks are equally noisy, two runs' V estimates correlate
by 1/4, and the mean of m of them has the variance of ``m / (1 + (m - 1) / 4)`` independent
ones. V applies to every k (a k not swept takes the pooled V). **One repeat:** the mart has no
interval (V cannot be told from the effect with one block per level), so there is no noise
estimate and no prediction interval: the plan says so, never a guess.

**The prediction interval** of a new measurement with R repeats, at level 1 - alpha, on the log
scale, each side of the expected speedup's bootstrap interval [L, U] around the point P widened
in quadrature with the measurement's half-width::

    ln low  = ln P - sqrt((ln P - ln L)^2 + (t(1 - alpha/2, df_c) sqrt(V_c / R))^2)
    ln high = ln P + sqrt((ln U - ln P)^2 + (t(1 - alpha/2, df_c) sqrt(V_c / R))^2)

(the estimate's error and the new measurement's noise are independent; each side keeps the
bootstrap's skew). R is the planned run's repeats (a ``--validate`` replay runs its design); a
replay with other repeats is compared against the interval for its own R
(``validate.validation``). The bootstrap interval [L, U] stays beside it: it is the confidence
interval of the expected speedup, and the decision rule reads it (``recommend.py``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from specdec.analytics.variance import t_quantile

__all__ = ["MeasurementNoise", "block_variance", "half_width", "pooled_noise", "prediction_interval"]

#: the speedup mart's pointwise interval level
MART_LEVEL = 0.95
#: the pooled df where a run's mart row has an infinite df (V known exactly): finite, so plan.json
#: holds it (JSON has no infinity), and large enough that its t quantile is the normal's
EXACT_DF = 1e9


@dataclass(frozen=True)
class MeasurementNoise:
    """One category's measurement noise: ``variance`` V of one block figure [log^2] and its ``df``
    (None, with ``how`` saying why, when it cannot be estimated); ``repeats`` R of the planned run."""

    variance: float | None
    df: float | None
    repeats: int | None
    runs: int
    how: str

    def as_dict(self) -> dict:
        return {
            "block_variance_log": self.variance,
            "df": self.df,
            "repeats": self.repeats,
            "runs_pooled": self.runs,
            "how": self.how,
        }


def block_variance(low: float | None, high: float | None, df: float | None, repeats: int | None) -> float | None:
    """V from a speedup mart row's pointwise 95% interval (None without one)."""
    if low is None or high is None or df is None or not df > 0 or not repeats or low <= 0 or high <= 0:
        return None
    half = (math.log(high) - math.log(low)) / 2
    return repeats * (half / t_quantile(1 - (1 - MART_LEVEL) / 2, df)) ** 2


def pooled_noise(rows: Iterable[tuple[str, float | None, float | None, float | None, int | None]]) -> MeasurementNoise:
    """Pool one category's rows (analysis run, pointwise low, high, df, repeats), one or more per
    run (its levels: the same V), over the runs."""
    per_run: dict[str, list[tuple[float, float, int]]] = {}
    for run, low, high, df, repeats in rows:
        v = block_variance(low, high, df, repeats)
        if v is not None and df is not None and repeats is not None:
            per_run.setdefault(run, []).append((v, float(df), int(repeats)))
    if not per_run:
        return MeasurementNoise(
            None,
            None,
            None,
            0,
            "not estimated: no run of the plan's sweep has a measured interval (one repeat, or no paired "
            "requests), so the run-to-run noise cannot be told from the effect; no prediction interval",
        )
    vs = [
        (sum(v for v, _, _ in r) / len(r), sum(d for _, d, _ in r) / len(r), min(n for *_, n in r))
        for r in per_run.values()
    ]
    m = len(vs)
    exact = [x for x, d, _ in vs if math.isinf(d)]
    if exact:  # a run whose V is known exactly (infinite df: its blocks agree to the last digit) outweighs the rest
        v, df = sum(exact) / len(exact), EXACT_DF
    else:
        df_sum = sum(d for _, d, _ in vs)
        v = sum(d * x for x, d, _ in vs) / df_sum
        df = df_sum / (1 + (m - 1) / 4)
    return MeasurementNoise(
        v,
        df,
        min(n for *_, n in vs),
        m,
        f"the speedup mart's noise model (variance of one block figure, Satterthwaite df) of {m} analysis "
        f"run(s) of the planned run folder, pooled (df-weighted V; df = sum / (1 + (m - 1) / 4))",
    )


def prediction_interval(
    point: float, low: float, high: float, noise: MeasurementNoise, repeats: int | None, confidence: float
) -> tuple[float | None, float | None]:
    """The prediction interval of a measurement with ``repeats`` repeats (the module's formula);
    (None, None) without a noise estimate."""
    if noise.variance is None or noise.df is None or not repeats or point <= 0 or low <= 0 or high <= 0:
        return None, None
    m = t_quantile(1 - (1 - confidence) / 2, noise.df) * math.sqrt(noise.variance / repeats)
    lp = math.log(point)
    down = math.sqrt(max(lp - math.log(low), 0.0) ** 2 + m**2)
    up = math.sqrt(max(math.log(high) - lp, 0.0) ** 2 + m**2)
    return math.exp(lp - down), math.exp(lp + up)


def half_width(rows: list[dict]) -> float | None:
    """The median over the cells of the prediction interval's half-width as a share,
    exp((ln high - ln low) / 2) - 1: how wide the intervals the coverage was read against are."""
    w = [
        math.exp((math.log(r["predicted_high"]) - math.log(r["predicted_low"])) / 2) - 1
        for r in rows
        if r["predicted_low"] is not None and r["predicted_high"] is not None
    ]
    return float(statistics.median(w)) if w else None
