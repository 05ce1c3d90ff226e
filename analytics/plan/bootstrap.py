"""Point predictions and their bootstrap replicates for every (k', level, category).

Each replicate redraws both sources of uncertainty at once:

* acceptance: the category's requests resampled with replacement, by repeat when the run
  has two or more (the repeats drawn with replacement, then each drawn repeat's requests,
  so the interval carries the repeat-to-repeat spread); tau and dbar are then the pooled
  ratios over the drawn requests (``model.RoundSums``). A repeat of more than 20,000
  requests is resampled as 2,000 groups of its requests (request i in group i mod 2,000,
  in the order of its request ids' hashes, ``data._request_rows``): the groups' sums are independent and identically
  distributed like the requests', so the spread of the resampled totals is the same to
  first order, and a replicate costs 2,000 draws instead of one per request (at 800k
  requests the per-request draws made the bootstrap take minutes; benchmarks/plan_scale.py);
* timing: the verify and draft coefficients drawn from the normal distribution of their
  least-squares estimates (``fit.LinearFit.draw``), one draw per replicate shared by every
  cell, as one fitted cost serves them all.

The interval of a figure is the percentile interval of its replicates (95% by default). The
point prediction uses every request once and the fitted coefficients; the seed is fixed, so
a plan is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.analytics.plan.data import PlanInputs
from specdec.analytics.plan.predict import StepCost, StepsMet, met_at, met_step_ms, predict, predict_met

__all__ = ["Predictions", "predictions", "replicate_weights"]

#: replicates whose request weights are drawn and multiplied at once
CHUNK = 32
#: a repeat with more requests than this is resampled in BUCKETS random groups of its requests
BUCKET_ABOVE = 20_000
BUCKETS = 2_000
FIGURES = ("step_ms", "tokens_per_s", "system_tokens_per_s", "speedup")


@dataclass(frozen=True)
class Predictions:
    """``point[figure]``: array (k', level, category); ``boot[figure]``: (replicate, k', level, category);
    ``tau`` and ``dbar``: (k', category) point values."""

    ks: list[int]
    levels: list[int]
    categories: list[str]
    point: dict[str, np.ndarray]
    boot: dict[str, np.ndarray]
    tau: np.ndarray
    dbar: np.ndarray
    confidence: float

    def interval(self, figure: str) -> tuple[np.ndarray, np.ndarray]:
        a = (1 - self.confidence) / 2
        b = self.boot[figure]
        return np.quantile(b, a, axis=0), np.quantile(b, 1 - a, axis=0)


def replicate_weights(members: list[np.ndarray], requests: int, rng: np.random.Generator) -> np.ndarray:
    """One replicate's bootstrap counts per request (``members``: the request indices of each
    repeat): the repeats drawn with replacement when there are 2 or more, then each drawn
    repeat's requests drawn with replacement, counted with bincount. One replicate at a time: all
    of them at once would need gigabytes at 800k requests."""
    if len(members) >= 2:
        drawn = rng.multinomial(len(members), np.full(len(members), 1 / len(members)))
    else:
        drawn = np.ones(1, dtype=np.int64)
    picks = [m[rng.integers(0, len(m), times * len(m))] for m, times in zip(members, drawn) if times]
    return np.bincount(np.concatenate(picks), minlength=requests).astype(float)


def resampling_units(stacked: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The units the bootstrap draws: the requests, except in a repeat of more than
    ``BUCKET_ABOVE`` requests, whose requests are summed into ``BUCKETS`` buckets (request i of
    the repeat into bucket i mod BUCKETS). Returns the units' rows of ``stacked`` and each
    repeat's unit indices."""
    rows, members, start = [], [], 0
    for c in np.unique(cluster):
        mine = stacked[cluster == c]
        if len(mine) > BUCKET_ABOVE:
            bucket = np.arange(len(mine)) % BUCKETS
            mine = np.stack(
                [np.bincount(bucket, weights=mine[:, j], minlength=BUCKETS) for j in range(mine.shape[1])], 1
            )
        rows.append(mine)
        members.append(np.arange(start, start + len(mine)))
        start += len(mine)
    return np.vstack(rows), members


def _cost(verify: np.ndarray, draft: np.ndarray) -> StepCost:
    return StepCost(tuple(float(v) for v in verify), (float(draft[0]), float(draft[1]), float(draft[2])))


#: (category, level) -> arm k (0: the baseline) -> what the category's decode rounds met (``model.StepsMet``)
Met = dict[tuple[str, int], dict[int, StepsMet]]


def predictions(
    inputs: PlanInputs,
    ks: list[int],
    *,
    replicates: int = 400,
    seed: int = 0,
    confidence=0.95,
    met: Met | None = None,
):
    """Point predictions and ``replicates`` bootstrap replicates for ``ks`` (each <= captured k).
    With ``met`` (a cell's baseline and at least one speculative arm measured), a cell is predicted
    from what its category's rounds met (``predict.predict_met``): its speedup is the geometric mean
    of the requests' e2e ratios, and a replicate's is the point's times the replicate's ratio of
    pooled rates over the point's (the requests' spread around the pooled rate taken as known, so
    a replicate costs no pass over the requests); without it, ``predict.predict``."""
    rng = np.random.default_rng(seed)
    cats, levels = inputs.categories, inputs.levels
    kk = np.array(ks)
    shape = (len(ks), len(levels), len(cats))
    point = {f: np.zeros(shape) for f in FIGURES}
    boot = {f: np.zeros((replicates, *shape)) for f in FIGURES}
    cost = _cost(inputs.verify_fit.coef, inputs.draft_fit.coef)
    vdraw = inputs.verify_fit.draw(rng, replicates)
    ddraw = inputs.draft_fit.draw(rng, replicates)
    tau = np.zeros((len(ks), len(cats)))
    dbar = np.zeros((len(ks), len(cats)))
    tau_b = np.zeros((replicates, len(ks), len(cats)))
    # the step's batch is the run's mix: drafts and rounds summed over every category
    mix_drafts, mix_rounds = np.zeros(len(ks)), np.zeros(len(ks))
    mix_drafts_b, mix_rounds_b = np.zeros((replicates, len(ks))), np.zeros((replicates, len(ks)))
    for c, cat in enumerate(cats):
        rs = inputs.rounds[cat]
        tau[:, c], dbar[:, c] = rs.tau()[kk], rs.dbar()[kk]
        mix_drafts += rs.drafts.sum(axis=0)[kk]
        mix_rounds += rs.rounds.sum(axis=0)[kk]
        # one product per chunk of replicates: (chunk x requests) @ (requests x [tokens | drafts | rounds], each per k')
        stacked, members = resampling_units(np.hstack([rs.tokens, rs.drafts, rs.rounds]), rs.cluster)
        sums = np.zeros((replicates, stacked.shape[1]))
        for start in range(0, replicates, CHUNK):
            stop = min(start + CHUNK, replicates)
            w = np.stack([replicate_weights(members, len(stacked), rng) for _ in range(start, stop)])
            sums[start:stop] = w @ stacked
        width = rs.tokens.shape[1]
        tau_b[:, :, c] = (sums[:, :width] / sums[:, 2 * width :])[:, kk]
        mix_drafts_b += sums[:, width : 2 * width][:, kk]
        mix_rounds_b += sums[:, 2 * width :][:, kk]
    dbar_mix, dbar_mix_b = mix_drafts / mix_rounds, mix_drafts_b / mix_rounds_b
    # the mix's drafts per request per step at every k' up to the captured k (met_at's drafts at a k' not swept)
    grid_drafts = sum(inputs.rounds[cat].drafts.sum(axis=0) for cat in cats)
    grid_rounds = sum(inputs.rounds[cat].rounds.sum(axis=0) for cat in cats)
    dbar_grid = np.asarray(grid_drafts, float) / np.asarray(grid_rounds, float)
    for c, cat in enumerate(cats):
        for li, level in enumerate(levels):
            by_k = (met or {}).get((cat, level), {})
            if 0 in by_k and any(kk > 0 for kk in by_k):
                _predict_cell_met(
                    point,
                    boot,
                    (li, c),
                    inputs.rounds[cat],
                    tau[:, c],
                    tau_b[:, :, c],
                    by_k,
                    kk,
                    cost,
                    vdraw,
                    ddraw,
                    dbar_grid,
                )
                continue
            # B per k' (k' = 0: B_0; PlanInputs.spec_batch_at: measured at a swept k, else interpolated)
            b0 = inputs.batch[level]
            bk = np.array([b0 if k == 0 else inputs.spec_batch_at(k, level)[0] for k in ks])
            for f, v in predict(tau[:, c], dbar_mix, cost, b0, bk, kk).items():
                point[f][:, li, c] = v
            for b in range(replicates):
                got = predict(tau_b[b, :, c], dbar_mix_b[b], _cost(vdraw[b], ddraw[b]), b0, bk, kk)
                for f, v in got.items():
                    boot[f][b, :, li, c] = v
    return Predictions(list(ks), list(levels), list(cats), point, boot, tau, dbar, confidence)


def _predict_cell_met(point, boot, cell, rs, tau, tau_b, by_k, kk, cost, vdraw, ddraw, dbar_grid) -> None:
    """One (level, category) cell from what its rounds met: the point by ``predict.predict_met``, the
    replicates by the shift of the pooled rates' log ratio (``predictions``)."""
    li, c = cell
    mets = [by_k[0] if k == 0 else met_at(by_k, int(k), dbar_grid)[0] for k in kk]
    got = predict_met(tau, rs.tokens[:, kk], rs.rounds[:, kk], cost, mets, kk)
    for f in FIGURES:
        point[f][:, li, c] = got[f]
    batch = np.array([m.batch for m in mets])
    for b in range(len(vdraw)):
        step = met_step_ms(_cost(vdraw[b], ddraw[b]), mets, kk)
        rate = 1000.0 * tau_b[b] / step
        boot["step_ms"][b, :, li, c] = step
        boot["tokens_per_s"][b, :, li, c] = rate
        boot["system_tokens_per_s"][b, :, li, c] = batch * rate
        boot["speedup"][b, :, li, c] = got["speedup"] * (rate / rate[0]) / got["speedup_of_rates"]
