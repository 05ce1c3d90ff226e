"""Decisions from the predictions: the k to deploy per category and load band, and three
policies' traffic-weighted gains, each with its bootstrap interval.

**A choice among k values** (``choose``): the best k is the one with the highest point
speedup; the chosen k is the *smallest* k whose interval overlaps the best one's
(conservative ties). k = 0 (speculation off) has speedup 1 in every replicate, so when
the best k's interval reaches 1 or below, speculation is off. The runner-up is the k with
the highest point speedup other than the chosen one.

**Load bands.** The run's concurrency levels l_1 < l_2 < ...; band i is the batch sizes
(l_{i-1}, l_i] (the first from 1), predicted at level l_i.

**Traffic weights.** ``mix`` gives request shares m_c (default: the run's own shares of
baseline requests); a category's weight is its share of output tokens,
w_c = m_c * t_c / sum(m * t), t_c its mean output tokens per request. A policy assigns a k
to every (band, category); its gain in band l is the ratio of the time the mix's tokens
take at k = 0 to the time they take under the policy (a weighted harmonic mean):

    gain_l = 1 / sum_c (w_c / speedup(k(l, c), l, c))
    gain   = 1 / sum_l u_l sum_c (w_c / speedup(k(l, c), l, c))    u_l = 1 / bands (equal time per band)

Policies: ``one_k`` (one k everywhere, chosen on ``gain``), ``k_per_band`` (one k per band,
chosen on gain_l), ``k_per_band_with_fallback`` (per band, one k for the categories whose
own recommended k is above 0 there, chosen on gain_l; the others off: the plain pool).

**Intervals.** ``low``/``high``: the bootstrap's confidence interval of the expected speedup
(the ties above read it); ``prediction_low``/``prediction_high``: the prediction interval of a
new replay's measured speedup (``noise.py``: the same widened by the measurement's run-to-run
noise; None when that noise cannot be estimated), which ``--validate`` compares against.

**SLO.** With ``slo_ttft_p95_ms``, k > 0 is not eligible in a cell where the speculative
arm's measured p95 TTFT exceeded it (TTFT is measured at the captured k only, not
predicted: that measurement stands for every k > 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec.analytics.plan.bootstrap import Predictions
from specdec.analytics.plan.data import PlanInputs
from specdec.analytics.plan.noise import prediction_interval
from specdec.errors import SpecdecError

__all__ = ["Choice", "band_ranges", "choose", "decide", "policy_gain", "token_weights"]


@dataclass(frozen=True)
class Choice:
    chosen: int  # index into ks
    best: int
    runner_up: int | None


def choose(point: np.ndarray, lo: np.ndarray, hi: np.ndarray, eligible: np.ndarray | None = None) -> Choice:
    """The conservative choice among k indices (index 0 is k = 0, always eligible)."""
    ok = np.ones(len(point), bool) if eligible is None else eligible.copy()
    ok[0] = True
    idx = np.flatnonzero(ok)
    best = int(idx[np.argmax(point[idx])])
    chosen = int(next(i for i in idx if hi[i] >= lo[best]))
    rest = [i for i in idx if i != chosen]
    runner = int(max(rest, key=lambda i: point[i])) if rest else None
    return Choice(chosen, best, runner)


def band_ranges(levels: list[int]) -> list[tuple[int, int]]:
    """Batch-size range (first, last) of each level's band."""
    out, prev = [], 0
    for level in levels:
        out.append((prev + 1, level))
        prev = level
    return out


def token_weights(inputs: PlanInputs, mix: dict[str, float] | None) -> tuple[dict[str, float], dict[str, float]]:
    """(request shares, output-token weights) per category of the run."""
    if mix is None:
        count = sum(inputs.requests.values())
        shares = {c: inputs.requests[c] / count for c in inputs.categories} if count else {}
    else:
        unknown = sorted(set(mix) - set(inputs.categories))
        if unknown:
            raise SpecdecError(
                f"--mix names {', '.join(unknown)}, not a category of the run's speculative rounds "
                f"({', '.join(inputs.categories)})"
            )
        total = sum(mix.values())
        shares = {c: mix.get(c, 0.0) / total for c in inputs.categories}
    tok = {c: shares.get(c, 0.0) * inputs.tokens_per_request[c] for c in inputs.categories}
    denom = sum(tok.values())
    if denom <= 0:
        raise SpecdecError("the traffic mix gives no output tokens to weigh (every share or token count is 0)")
    return shares, {c: v / denom for c, v in tok.items()}


def policy_gain(speedup: np.ndarray, assign: np.ndarray, w: np.ndarray, bands: list[int] | None = None) -> np.ndarray:
    """Gain of an assignment (level, category) -> k index over ``bands`` (level indices; all when
    None). ``speedup``: (..., k, level, category); returns (...)."""
    levels = range(speedup.shape[-2]) if bands is None else bands
    inv: Any = 0.0
    for li in levels:
        for c in range(speedup.shape[-1]):
            if w[c]:
                inv = inv + w[c] * (1 / speedup[..., assign[li, c], li, c])
    return len(levels) / inv


def _interval(pred: Predictions, values: np.ndarray) -> tuple[float, float]:
    a = (1 - pred.confidence) / 2
    return float(np.quantile(values, a)), float(np.quantile(values, 1 - a))


def _figure(pred: Predictions, assign: np.ndarray, w: np.ndarray, bands=None) -> dict:
    p = float(policy_gain(pred.point["speedup"], assign, w, bands))
    lo, hi = _interval(pred, policy_gain(pred.boot["speedup"], assign, w, bands))
    return {"gain": p, "low": lo, "high": hi}


def _pick(pred: Predictions, make_assign, w: np.ndarray, bands=None) -> int:
    """The conservative choice of one k index for an assignment family ``make_assign(k index)``."""
    n = len(pred.ks)
    points = np.array([policy_gain(pred.point["speedup"], make_assign(i), w, bands) for i in range(n)])
    boots = [policy_gain(pred.boot["speedup"], make_assign(i), w, bands) for i in range(n)]
    ints = [_interval(pred, b) for b in boots]
    return choose(points, np.array([i[0] for i in ints]), np.array([i[1] for i in ints])).chosen


def decide(
    pred: Predictions, inputs: PlanInputs, weights: dict[str, float], slo_ttft_p95_ms: float | None = None
) -> dict:
    """The cells' choices and the three policies, as plain data (plan.json's ``cells`` and ``policies``)."""
    cats, levels, ks = pred.categories, pred.levels, pred.ks
    w = np.array([weights[c] for c in cats])
    lo, hi = pred.interval("speedup")
    sp = pred.point["speedup"]
    cells, cell_k = [], np.zeros((len(levels), len(cats)), dtype=int)
    for li, level in enumerate(levels):
        for c, cat in enumerate(cats):
            eligible = np.ones(len(ks), bool)
            ttft = inputs.ttft_p95_ms.get(("speculative", cat, level))
            base_ttft = inputs.ttft_p95_ms.get(("baseline", cat, level))
            slo_out = slo_ttft_p95_ms is not None and ttft is not None and ttft > slo_ttft_p95_ms
            if slo_out:
                eligible[1:] = False
            ch = choose(sp[:, li, c], lo[:, li, c], hi[:, li, c], eligible)
            cell_k[li, c] = ch.chosen
            noise = inputs.noise.get(cat)
            pis = [
                prediction_interval(sp[i, li, c], lo[i, li, c], hi[i, li, c], noise, noise.repeats, pred.confidence)
                if noise is not None
                else (None, None)
                for i in range(len(ks))
            ]
            cells.append(
                {
                    "category": cat,
                    "level": level,
                    "recommended_k": ks[ch.chosen],
                    "speedup": float(sp[ch.chosen, li, c]),
                    "low": float(lo[ch.chosen, li, c]),
                    "high": float(hi[ch.chosen, li, c]),
                    "prediction_low": pis[ch.chosen][0],
                    "prediction_high": pis[ch.chosen][1],
                    "best_k": ks[ch.best],
                    "runner_up_k": ks[ch.runner_up] if ch.runner_up is not None else None,
                    "runner_up_speedup": float(sp[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "runner_up_low": float(lo[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "runner_up_high": float(hi[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "ttft_p95_ms_speculative": ttft,
                    "ttft_p95_ms_baseline": base_ttft,
                    "slo_excluded_speculation": bool(slo_out),
                    "by_k": [
                        {
                            "k": k,
                            "speedup": float(sp[i, li, c]),
                            "low": float(lo[i, li, c]),
                            "high": float(hi[i, li, c]),
                            "prediction_low": pis[i][0],
                            "prediction_high": pis[i][1],
                            "tokens_per_s": float(pred.point["tokens_per_s"][i, li, c]),
                            "system_tokens_per_s": float(pred.point["system_tokens_per_s"][i, li, c]),
                            "step_ms": float(pred.point["step_ms"][i, li, c]),
                        }
                        for i, k in enumerate(ks)
                    ],
                }
            )
    n_l, n_c = len(levels), len(cats)
    one = _pick(pred, lambda i: np.full((n_l, n_c), i), w)
    per_band = np.zeros((n_l, n_c), dtype=int)
    fallback = np.zeros((n_l, n_c), dtype=int)
    for li in range(n_l):
        per_band[li, :] = _pick(pred, lambda i: np.full((n_l, n_c), i), w, [li])
        on = cell_k[li] > 0
        if on.any():

            def assign_on(i, on=on):
                a = np.zeros((n_l, n_c), dtype=int)
                a[:, on] = i
                return a

            fallback[li, on] = _pick(pred, assign_on, w, [li])
    policies = []
    for name, assign, text in (
        ("one_k", np.full((n_l, n_c), one), "one k for every category and load"),
        ("k_per_band", per_band, "one k per load band, every category"),
        (
            "k_per_band_with_fallback",
            fallback,
            "one k per load band for the categories where speculation pays there; the others off (plain pool)",
        ),
    ):
        policies.append(
            {
                "name": name,
                "description": text,
                "overall": _figure(pred, assign, w),
                "bands": [
                    {
                        "level": level,
                        "k": {cat: ks[assign[li, c]] for c, cat in enumerate(cats)},
                        **_figure(pred, assign, w, [li]),
                    }
                    for li, level in enumerate(levels)
                ],
            }
        )
    pool = fallback.max(axis=0) > 0
    pool_k = 0
    if pool.any():

        def assign_pool(i):
            a = np.zeros((n_l, n_c), dtype=int)
            a[:, pool] = i
            return a

        pool_k = ks[_pick(pred, assign_pool, w)]
    speculative_pool = {
        "categories": [cat for c, cat in enumerate(cats) if pool[c]],
        "one_k": pool_k,
        "description": "one k for the speculative pool's categories in every band (an engine without a "
        "batch-size schedule: llama.cpp); the others plain",
    }
    return {"cells": cells, "policies": policies, "speculative_pool": speculative_pool}
