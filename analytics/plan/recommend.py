"""Decisions from the predictions: the k to deploy per category and load band, and three
policies' traffic-weighted gains, each with its bootstrap interval.

**The rule** (``rule_text``, stated once; plan.json's ``decision_rule`` and the top of plan.html
carry it). Off (k = 0) is the default, and a k > 0 must earn its place:

* **eligible**: a k > 0 whose predicted speedup (point) is above 1 and whose interval's lower
  bound (the bootstrap's, at the plan's confidence) is above 1, where the SLO allows
  speculation. No eligible k: off;
* **best**: the eligible k with the highest point speedup;
* **a smaller k** is preferred to the best only when the *paired* ratio speedup(k) /
  speedup(best), computed within each bootstrap replicate, has the lower bound of its interval
  (the same confidence) at or above 1 / (1 + margin): within the run's margin of the best with
  that confidence (the margin of the speedup labels, ``analytics/labels.py``: "equivalent"
  is inside [1 / (1 + margin), 1 + margin]; ``int_run_settings.margin``, default 5%). The
  smallest such eligible k is chosen.

Why paired: the predictions of different k in one cell share most of their uncertainty (the
same resampled requests and the same drawn step cost in a replicate, ``bootstrap.py``), so
their marginal intervals overlap even where every replicate puts one k well above the other;
the ratio within a replicate keeps what they share out. (The first rule, the smallest k whose
marginal interval overlapped the best one's, recommended chat k = 1 at 0.996x at c1 of the
demo run, where k = 4 predicted 1.015x, and structured k = 2 at 1.256x at c8 where k = 4
predicted 1.436x: issue 42.) The runner-up is the k with the highest point speedup other than
the chosen one.

**Load bands.** The run's concurrency levels l_1 < l_2 < ...; band i is the batch sizes
(l_{i-1}, l_i] (the first from 1), predicted at level l_i.

**Traffic weights.** ``mix`` gives request shares m_c (default: the run's own shares of
baseline requests); a category's weight is its share of output tokens,
w_c = m_c * t_c / sum(m * t), t_c its mean output tokens per request. A policy assigns a k
to every (band, category); its gain in band l is the ratio of the time the mix's tokens
take at k = 0 to the time they take under the policy (a weighted harmonic mean):

    gain_l = 1 / sum_c (w_c / speedup(k(l, c), l, c))
    gain   = 1 / sum_l u_l sum_c (w_c / speedup(k(l, c), l, c))    u_l = 1 / bands (equal time per band)

**Policies**, each k chosen by the rule above applied to the policy's gain (its replicates
paired the same way): ``one_k`` (one k everywhere, on ``gain``), ``k_per_band`` (one k per
band, on gain_l), ``k_per_band_with_fallback`` (the one deployed, and the one the exports
follow). Routing sends a category to one pool for every band, and the speculative pool's
engine runs one k per band (vLLM's batch-size schedule), so the deployed policy is a pool of
categories with one k per band: the pool starts as the categories whose own decision is a
k > 0 in some band; each band's k is chosen by the rule on the band's gain with the pool at
that k and the others off. Routing is per category, so a category's place in the pool is
decided over the bands, as a cell's k is: it stays when its own gain at the bands' k (equal
time per band, its replicates paired) is above 1 with its interval's lower bound above 1, and
no band's k > 0 is predicted below 1 for it (or ruled out there by the SLO or thin evidence);
otherwise it leaves the pool (the plain pool: off everywhere), and the bands' k are chosen
again without it, until every pooled category stays. (Asking each band's k to clear 1 on its
own, the first rule, sent a category predicted 1.32x at c1 and 1.05-1.08x at c4/c8 to the
plain pool on a held-out sweep; the replay measured off 19% slower than k = 4 at c1.) The
per-cell table shows each cell's own decision beside the k the deployed policy gives it. The
llama.cpp pool's one k (no batch-size schedule): the rule on the pool's gain over every band,
among the k at which every pooled category stays by the same test (none: off).

**Intervals.** ``low``/``high``: the bootstrap's confidence interval of the expected speedup
(the rule reads it); ``prediction_low``/``prediction_high``: the prediction interval of a
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

from specdec.analytics.labels import DEFAULT_MARGIN
from specdec.analytics.plan.bootstrap import Predictions
from specdec.analytics.plan.data import PlanInputs
from specdec.analytics.plan.noise import prediction_interval
from specdec.errors import SpecdecError

__all__ = [
    "Choice",
    "band_ranges",
    "choose",
    "decide",
    "eligible_ks",
    "policy_gain",
    "rule_text",
    "token_weights",
]


def rule_text(margin: float, confidence: float) -> str:
    """The decision rule in one paragraph (plan.json's ``decision_rule``, the top of plan.html)."""
    c, m = f"{confidence:.0%}", f"{margin:.0%}"
    return (
        f"Off (k = 0) is the default; a k > 0 must earn its place. A k > 0 is eligible where its predicted "
        f"speedup is above 1 and the lower bound of its {c} bootstrap interval is above 1 (and the SLO, when "
        f"given, allows speculation). Among the eligible k the one with the highest predicted speedup is the "
        f"best; a smaller eligible k is chosen instead only when the paired ratio of its speedup to the best "
        f"one's, taken within each bootstrap replicate (the same resampled requests, the same drawn step cost), "
        f"has the lower bound of its {c} interval at or above 1 / (1 + margin) = {1 / (1 + margin):.3f}: within "
        f"the run's margin ({m}) of the best with that confidence. No eligible k: off. Every policy below "
        f"chooses its k by the same rule on its traffic-weighted gain. The deployed one routes each category to "
        f"one pool: the speculative pool, with one k per load band chosen by the rule on the pool's gain in the "
        f"band, holds the categories whose own decision is a k > 0 in some band, less any whose own gain at "
        f"the bands' k (equal time per band, replicates paired) does not clear 1 as above, or for which a band's "
        f"k > 0 is predicted below 1 (those go to the plain pool, off, and the bands' k are chosen again "
        f"without them)."
    )


@dataclass(frozen=True)
class Choice:
    """``chosen``, ``best`` (the eligible k with the highest point; 0 when none), ``runner_up``: indices
    into ks. ``ratio_low``/``ratio_high``: the interval of the paired ratio chosen / best (None when
    chosen is best or off). ``reason``: 'off' (no k > 0 eligible), 'best', 'within_margin'."""

    chosen: int
    best: int
    runner_up: int | None
    ratio_low: float | None = None
    ratio_high: float | None = None
    reason: str = "best"


def _tails(confidence: float) -> tuple[float, float]:
    a = (1 - confidence) / 2
    return a, 1 - a


def eligible_ks(
    point: np.ndarray, boot: np.ndarray, confidence: float, allowed: np.ndarray | None = None
) -> np.ndarray:
    """Which k indices may be recommended (index 0, off, is not among them: it needs no evidence):
    point above 1 and the interval's lower bound above 1, where ``allowed``. ``point``: (..., k);
    ``boot``: (replicate, ..., k)."""
    lo = np.quantile(boot, _tails(confidence)[0], axis=0)
    ok = (np.asarray(point) > 1.0) & (lo > 1.0)
    if allowed is not None:
        ok &= allowed
    ok[..., 0] = False
    return ok


def choose(
    point: np.ndarray,
    boot: np.ndarray,
    eligible: np.ndarray | None = None,
    *,
    margin: float = DEFAULT_MARGIN,
    confidence: float = 0.95,
) -> Choice:
    """The rule (the module's) among k indices: ``point`` (k,), ``boot`` (replicate, k) the same
    figure in each bootstrap replicate (index 0 is k = 0, 1 in every replicate); ``eligible`` (k,)
    bool: the k's the SLO allows (None: all)."""
    point = np.asarray(point, float)
    boot = np.asarray(boot, float)
    allowed = np.ones(len(point), bool) if eligible is None else np.asarray(eligible, bool).copy()
    allowed[0] = True
    ok = eligible_ks(point, boot, confidence, allowed)
    idx = np.flatnonzero(ok)
    if not len(idx):
        chosen, best, reason, r_lo, r_hi = 0, 0, "off", None, None
    else:
        best = int(idx[np.argmax(point[idx])])
        chosen, reason, r_lo, r_hi = best, "best", None, None
        lo_q, hi_q = _tails(confidence)
        for i in idx[idx < best]:
            ratio = boot[:, i] / boot[:, best]
            low = float(np.quantile(ratio, lo_q))
            if low >= 1 / (1 + margin):
                chosen, reason, r_lo, r_hi = int(i), "within_margin", low, float(np.quantile(ratio, hi_q))
                break
    rest = [int(i) for i in np.flatnonzero(allowed) if i != chosen]
    runner = max(rest, key=lambda i: point[i]) if rest else None
    return Choice(chosen, best, runner, r_lo, r_hi, reason)


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
    cats = np.flatnonzero(w)
    inv: Any = 0.0
    for li in levels:
        # (..., category): each weighted category's speedup at its assigned k in the band
        inv = inv + (w[cats] / speedup[..., assign[li, cats], li, cats]).sum(axis=-1)
    return len(levels) / inv


def _interval(pred: Predictions, values: np.ndarray) -> tuple[float, float]:
    lo_q, hi_q = _tails(pred.confidence)
    return float(np.quantile(values, lo_q)), float(np.quantile(values, hi_q))


def _figure(pred: Predictions, assign: np.ndarray, w: np.ndarray, bands=None) -> dict:
    p = float(policy_gain(pred.point["speedup"], assign, w, bands))
    lo, hi = _interval(pred, policy_gain(pred.boot["speedup"], assign, w, bands))
    return {"gain": p, "low": lo, "high": hi}


def _pick(
    pred: Predictions, make_assign, w: np.ndarray, margin: float, bands=None, eligible: np.ndarray | None = None
) -> Choice:
    """The rule's choice of one k index for an assignment family ``make_assign(k index)``, on the
    traffic-weighted gain over ``bands`` (its replicates paired as a cell's are)."""
    n = len(pred.ks)
    points = np.array([policy_gain(pred.point["speedup"], make_assign(i), w, bands) for i in range(n)])
    boots = np.stack([policy_gain(pred.boot["speedup"], make_assign(i), w, bands) for i in range(n)], axis=-1)
    return choose(points, boots, eligible, margin=margin, confidence=pred.confidence)


def _on(shape: tuple[int, int], on: np.ndarray):
    """The assignment family: k index i for the categories ``on`` in every band, the others off."""

    def assign(i: int) -> np.ndarray:
        a = np.zeros(shape, dtype=int)
        a[:, on] = i
        return a

    return assign


def _why(ch: Choice, ks: list[int], sp: np.ndarray, lo: np.ndarray, hi: np.ndarray, margin: float, slo: bool) -> str:
    """A cell's decision in words (``sp``/``lo``/``hi``: the cell's figures per k index)."""
    if ch.reason == "off":
        if slo:
            return "off: the SLO excludes speculation here (the speculative arm's measured p95 TTFT is above it)"
        top = int(np.argmax(sp[1:])) + 1
        return (
            f"off: no k > 0 has a predicted speedup above 1 with its interval's lower bound above 1 (highest: "
            f"k = {ks[top]}, {sp[top]:.3f} [{lo[top]:.3f}, {hi[top]:.3f}])"
        )
    if ch.reason == "within_margin":
        return (
            f"k = {ks[ch.chosen]}: within the margin of the best, k = {ks[ch.best]} ({sp[ch.best]:.3f}): paired "
            f"ratio [{ch.ratio_low:.3f}, {ch.ratio_high:.3f}], lower bound >= {1 / (1 + margin):.3f}"
        )
    return f"k = {ks[ch.chosen]}: the highest predicted speedup among the k whose interval clears 1"


def _deployed_note(own: int, dep: int, plain: str | None, ks: list[int], pooled: bool) -> str | None:
    """Why a cell's deployed k differs from its own decision (None where they agree)."""
    if dep == own:
        return None
    if not pooled:
        return f"plain pool: {plain}" if plain else "plain pool"
    return f"the speculative pool's one k in this band ({ks[dep]})"


def _leaves_pool(pred: Predictions, c: int, band_k: np.ndarray, allowed: np.ndarray) -> str | None:
    """Why category index ``c`` cannot be routed to the speculative pool whose bands run ``band_k``
    (k indices per level), or None when it can: the module docstring's test of a category over the
    bands (its own gain, ``policy_gain`` with the category alone, read as a cell's is; ``allowed``:
    decide's (k, level, category) mask of what the SLO and thin evidence leave)."""
    sp, bs = pred.point["speedup"], pred.boot["speedup"]
    ks, levels = pred.ks, pred.levels
    for li, k in enumerate(band_k):
        if k == 0:
            continue
        if not allowed[k, li, c]:
            return (
                f"the speculative pool's k at c{levels[li]} ({ks[k]}) is ruled out for it there (SLO or thin evidence)"
            )
        if sp[k, li, c] < 1.0:
            return f"the speculative pool's k at c{levels[li]} ({ks[k]}) is predicted below 1 for it there ({sp[k, li, c]:.3f})"
    w = np.zeros(sp.shape[-1])
    w[c] = 1.0
    assign = np.zeros((len(levels), sp.shape[-1]), dtype=int)
    assign[:, c] = band_k
    gain = float(policy_gain(sp, assign, w))
    low, high = _interval(pred, policy_gain(bs, assign, w))
    if gain > 1.0 and low > 1.0:
        return None
    return (
        f"its own gain at the speculative pool's k, over the bands, does not clear 1 "
        f"({gain:.3f} [{low:.3f}, {high:.3f}])"
    )


def decide(
    pred: Predictions,
    inputs: PlanInputs,
    weights: dict[str, float],
    slo_ttft_p95_ms: float | None = None,
    thin: dict[str, str] | None = None,
) -> dict:
    """The cells' choices and the three policies, as plain data (plan.json's ``decision_rule``, ``cells``,
    ``policies`` and ``speculative_pool``). ``thin``: category -> why its evidence is too thin for a
    k > 0 (``guards.thin_evidence``): like the SLO, it makes no k > 0 eligible in the category's cells."""
    thin = thin or {}
    cats, levels, ks = pred.categories, pred.levels, pred.ks
    margin, conf = inputs.margin, pred.confidence
    n_k, n_l, n_c = len(ks), len(levels), len(cats)
    w = np.array([weights[c] for c in cats])
    lo, hi = pred.interval("speedup")
    sp, bs = pred.point["speedup"], pred.boot["speedup"]
    allowed = np.ones((n_k, n_l, n_c), bool)
    slo_out = np.zeros((n_l, n_c), bool)
    for li, level in enumerate(levels):
        for c, cat in enumerate(cats):
            ttft = inputs.ttft_p95_ms.get(("speculative", cat, level))
            slo_out[li, c] = slo_ttft_p95_ms is not None and ttft is not None and ttft > slo_ttft_p95_ms
            allowed[1:, li, c] = not slo_out[li, c] and cat not in thin
    # (level, category, k index): may the rule recommend that k there
    ok = eligible_ks(np.moveaxis(sp, 0, -1), np.moveaxis(bs, 1, -1), conf, np.moveaxis(allowed, 0, -1))
    choices: dict[tuple[int, int], Choice] = {}
    cell_k = np.zeros((n_l, n_c), dtype=int)
    for li in range(n_l):
        for c in range(n_c):
            ch = choose(sp[:, li, c], bs[:, :, li, c], allowed[:, li, c], margin=margin, confidence=conf)
            choices[li, c] = ch
            cell_k[li, c] = ch.chosen
    one = _pick(pred, lambda i: np.full((n_l, n_c), i), w, margin).chosen
    per_band = np.zeros((n_l, n_c), dtype=int)
    for li in range(n_l):
        per_band[li, :] = _pick(pred, lambda i: np.full((n_l, n_c), i), w, margin, [li]).chosen
    # the deployed policy: routing is per category (one pool for every band) and the pool's engine has
    # one k per band (vLLM's batch-size schedule); a category leaves the pool where a band's k is not
    # eligible for it, and the bands' k are chosen again without it
    pool: np.ndarray = np.asarray((cell_k > 0).any(axis=0), dtype=bool)
    to_plain: dict[int, str] = {}
    while True:
        band_k = np.zeros(n_l, dtype=int)
        for li in range(n_l):
            if pool.any():
                band_k[li] = _pick(pred, _on((n_l, n_c), pool.copy()), w, margin, [li]).chosen
        if not (band_k > 0).any():
            break
        bad = {c: why for c in np.flatnonzero(pool) if (why := _leaves_pool(pred, c, band_k, allowed)) is not None}
        if not bad:
            break
        for c, why in bad.items():
            to_plain[c] = why
            pool[c] = False
    if not (band_k > 0).any():
        for c in np.flatnonzero(pool):
            to_plain[c] = "the speculative pool's gain does not clear 1 at any k in any band"
        pool = np.zeros(n_c, dtype=bool)
    fallback = np.zeros((n_l, n_c), dtype=int)
    fallback[:, pool] = band_k[:, None]
    policies = []
    for name, assign, text in (
        ("one_k", np.full((n_l, n_c), one), "one k for every category and load"),
        ("k_per_band", per_band, "one k per load band, every category"),
        (
            "k_per_band_with_fallback",
            fallback,
            "deployed: a speculative pool with one k per load band, for the categories whose own decision is a "
            "k > 0 in some band and for which each band's k is eligible; the others off (the plain pool)",
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
    pool_k = 0
    if pool.any():
        # one k for every band (no batch-size schedule): only a k every pooled category may run in every band
        pool_ok = np.array(
            [
                i > 0 and all(_leaves_pool(pred, c, np.full(n_l, i), allowed) is None for c in np.flatnonzero(pool))
                for i in range(n_k)
            ]
        )
        pool_k = ks[_pick(pred, _on((n_l, n_c), pool), w, margin, None, pool_ok).chosen]
    speculative_pool = {
        "categories": [cat for c, cat in enumerate(cats) if pool[c]],
        "one_k": pool_k,
        "description": "one k for the speculative pool's categories in every band (an engine without a "
        "batch-size schedule: llama.cpp), chosen by the same rule on the pool's gain over every band among the k "
        "eligible for each of the pool's categories in every band (none: off); the others plain",
    }
    cells = []
    for li, level in enumerate(levels):
        for c, cat in enumerate(cats):
            ch = choices[li, c]
            ttft = inputs.ttft_p95_ms.get(("speculative", cat, level))
            base_ttft = inputs.ttft_p95_ms.get(("baseline", cat, level))
            noise = inputs.noise.get(cat)
            pis = [
                prediction_interval(sp[i, li, c], lo[i, li, c], hi[i, li, c], noise, noise.repeats, conf)
                if noise is not None
                else (None, None)
                for i in range(n_k)
            ]
            dep = int(fallback[li, c])
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
                    "decision": f"off: thin evidence: {thin[cat]}"
                    if cat in thin
                    else _why(ch, ks, sp[:, li, c], lo[:, li, c], hi[:, li, c], margin, bool(slo_out[li, c])),
                    "thin_evidence": thin.get(cat),
                    "eligible_ks": [ks[i] for i in range(n_k) if ok[li, c, i]],
                    "best_k": ks[ch.best],
                    "ratio_to_best_low": ch.ratio_low,
                    "ratio_to_best_high": ch.ratio_high,
                    "deployed_k": ks[dep],
                    "deployed_speedup": float(sp[dep, li, c]),
                    "deployed_low": float(lo[dep, li, c]),
                    "deployed_high": float(hi[dep, li, c]),
                    "deployed_note": _deployed_note(ch.chosen, dep, to_plain.get(c), ks, bool(pool[c])),
                    "runner_up_k": ks[ch.runner_up] if ch.runner_up is not None else None,
                    "runner_up_speedup": float(sp[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "runner_up_low": float(lo[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "runner_up_high": float(hi[ch.runner_up, li, c]) if ch.runner_up is not None else None,
                    "ttft_p95_ms_speculative": ttft,
                    "ttft_p95_ms_baseline": base_ttft,
                    "slo_excluded_speculation": bool(slo_out[li, c]),
                    "by_k": [
                        {
                            "k": k,
                            "speedup": float(sp[i, li, c]),
                            "low": float(lo[i, li, c]),
                            "high": float(hi[i, li, c]),
                            "prediction_low": pis[i][0],
                            "prediction_high": pis[i][1],
                            "eligible": bool(ok[li, c, i]),
                            "tokens_per_s": float(pred.point["tokens_per_s"][i, li, c]),
                            "system_tokens_per_s": float(pred.point["system_tokens_per_s"][i, li, c]),
                            "step_ms": float(pred.point["step_ms"][i, li, c]),
                        }
                        for i, k in enumerate(ks)
                    ],
                }
            )
    rule = {"text": rule_text(margin, conf), "margin": margin, "confidence": conf}
    return {
        "decision_rule": rule,
        "cells": cells,
        "policies": policies,
        "speculative_pool": speculative_pool,
    }
