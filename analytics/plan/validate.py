"""``plan_validation``: a plan's predictions against a replay of its settings.

The validation run is a run of named arms (``--sweep-k``: k0 and one arm per k validated) at
the plan's levels. Each of its analysis runs measures one k against k0 (the speedup mart:
geometric mean of paired e2e ratios per category and level, pointwise 95% interval). Per cell
(k, category, level) that the plan predicted::

    relative_error = predicted / measured - 1
    covered        = predicted_low <= measured <= predicted_high

The interval is the **prediction interval** of a measured speedup (``noise.py``): the bootstrap
interval of the expected speedup widened by the run-to-run noise of a measurement with the
validation run's own repeats (the noise V estimated from the planned sweep's repeats). Without a
noise estimate (a one-repeat sweep) there is no prediction interval, ``covered`` is None and the
plan cannot pass. ``expected_low``/``expected_high`` (the bootstrap interval alone) are reported
beside it. ``intervals_overlap`` (reported, not a criterion): the prediction interval and the
measurement's own 95% interval overlap.

A plan is **validated** when at least one cell was compared, the median absolute relative
error is at most ``MAX_MEDIAN_ERROR`` (10%) and the prediction intervals hold at least
``MIN_COVERAGE`` (80%) of the measurements (issue 23's acceptance).

``outcome`` says which of three it is: ``validated`` (passed); ``failed`` (cells compared, the
criteria not met); ``not validated`` (nothing could be compared: the validation run sent no request
that succeeded, or measured no planned cell), with ``reason`` (``request_health``).
"""

from __future__ import annotations

import numpy as np

from specdec.analytics.plan.data import captured_ks
from specdec.analytics.plan.noise import MeasurementNoise, half_width, prediction_interval

__all__ = [
    "MAX_MEDIAN_ERROR",
    "MIN_COVERAGE",
    "measured_speedups",
    "outcome",
    "request_health",
    "validation",
    "validation_ks",
]

MAX_MEDIAN_ERROR = 0.10
MIN_COVERAGE = 0.80


def validation_ks(plan: dict) -> list[int]:
    """The k a validation replays: every k > 0 the deployed policy (k per band with fallback) uses,
    and one rejected k (the largest k planned that it does not use), when there is one."""
    used = {k for band in plan["policies"][2]["bands"] for k in band["k"].values() if k > 0}
    rejected = [k for k in plan["ks"] if k > 0 and k not in used]
    return sorted(used | ({max(rejected)} if rejected else set()))


def measured_speedups(con) -> dict[tuple[int, str, int], tuple]:
    """(k, category, level) -> (speedup, pointwise 95% low, high, repeats) of every analysis run of a
    built database, k being the largest k its speculative arm proposed."""
    out = {}
    for run, (_src, k) in captured_ks(con).items():
        for cat, level, s, lo, hi, repeats in con.execute(
            """select category, level, speedup, pointwise_ci_low, pointwise_ci_high, repeats
               from speedup where run_id = ? and category <> '(system)'""",
            [run],
        ).fetchall():
            out[(k, cat, level)] = (s, lo, hi, repeats)
    return out


def _noise(plan: dict, category: str) -> MeasurementNoise:
    d = (plan.get("measurement_noise") or {}).get(category)
    if d is None:
        return MeasurementNoise(None, None, None, 0, "not in the plan")
    return MeasurementNoise(d["block_variance_log"], d["df"], d["repeats"], d["runs_pooled"], d["how"])


def _share(flags: list) -> float | None:
    known = [f for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def validation(plan: dict, measured: dict) -> dict:
    """plan_validation: every planned cell the validation measured, with its error and coverage."""
    predicted = {(b["k"], c["category"], c["level"]): b for c in plan["cells"] for b in c["by_k"]}
    rows = []
    for key, (m, m_lo, m_hi, repeats) in sorted(measured.items()):
        if key not in predicted or m is None:
            continue
        p = predicted[key]
        k, cat, level = key
        # the prediction interval for this measurement's own repeats (the plan's is for the planned run's)
        lo, hi = prediction_interval(p["speedup"], p["low"], p["high"], _noise(plan, cat), repeats, plan["confidence"])
        rows.append(
            {
                "k": k,
                "category": cat,
                "level": level,
                "predicted": p["speedup"],
                "predicted_low": lo,
                "predicted_high": hi,
                "expected_low": p["low"],
                "expected_high": p["high"],
                "measured": m,
                "measured_low": m_lo,
                "measured_high": m_hi,
                "measured_repeats": repeats,
                "relative_error": p["speedup"] / m - 1,
                "covered": None if lo is None or hi is None else bool(lo <= m <= hi),
                "intervals_overlap": None if m_lo is None or lo is None else bool(lo <= m_hi and m_lo <= hi),
            }
        )
    errors = [abs(r["relative_error"]) for r in rows]
    median = float(np.median(errors)) if errors else None
    coverage = _share([r["covered"] for r in rows]) if all(r["covered"] is not None for r in rows) else None
    passed = median is not None and coverage is not None and median <= MAX_MEDIAN_ERROR and coverage >= MIN_COVERAGE
    return {
        "cells": rows,
        "cells_compared": len(rows),
        "median_absolute_relative_error": median,
        "coverage": coverage,
        "overlap_share": _share([r["intervals_overlap"] for r in rows]),
        "median_prediction_half_width": half_width(rows),
        "criteria": {"max_median_absolute_relative_error": MAX_MEDIAN_ERROR, "min_coverage": MIN_COVERAGE},
        "passed": passed,
        "wrong_cells": [r for r in rows if r["covered"] is False],
    }


def request_health(con) -> dict:
    """The validation run's requests over every arm, level and repeat (the level_health mart):
    how many were sent, how many succeeded, and the failures' error types and first message."""
    rows = con.execute(
        """select requests, requests_ok, error_types, error_example, arm, level
           from level_health order by run_id, arm, level"""
    ).fetchall()
    failed = [r for r in rows if r[0] > r[1]]
    counts: dict[str, int] = {}
    for r in failed:  # each level's '<error_type>: <count>; ...', summed over the levels
        for part in (r[2] or "").split("; "):
            kind, _, n = part.rpartition(": ")
            if kind and n.isdigit():
                counts[kind] = counts.get(kind, 0) + int(n)
    return {
        "requests": int(sum(r[0] for r in rows)),
        "requests_ok": int(sum(r[1] for r in rows)),
        "error_types": [f"{kind}: {n}" for kind, n in sorted(counts.items(), key=lambda t: (-t[1], t[0]))],
        "error_example": next((f"{r[4]} c{r[5]}: {r[3]}" for r in failed if r[3]), None),
    }


def outcome(result: dict, health: dict) -> tuple[str, str | None]:
    """(``validated`` | ``failed`` | ``not validated``, the reason when not validated)."""
    if health["requests_ok"] == 0:
        if health["requests"] == 0:
            return "not validated", "the validation run recorded no request"
        why = f"every one of its {health['requests']} requests failed"
        if health["error_types"]:
            why += f" ({'; '.join(health['error_types'])})"
        if health["error_example"]:
            why += f"; first: {health['error_example']}"
        return "not validated", why
    if result["cells_compared"] == 0:
        return "not validated", "the validation run measured none of the plan's cells (k, category, level)"
    return ("validated" if result["passed"] else "failed"), None
