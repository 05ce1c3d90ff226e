"""The planner's throughput model, stated once: what a speculative setting k' yields per
request and per step, from the rounds and step timings one run captured.

**Acceptance at k' <= k (truncation of the captured draft).** A captured decode round r
proposed k_r draft tokens (0 when the drafter found nothing) and accepted a_r of them (a
prefix: position i is accepted exactly when a_r >= i). Run at k', the same round would have
proposed min(k_r, k') and accepted min(a_r, k'), so per category, pooled over the run's
levels and repeats (sums over the decode rounds of the speculative arm's requests)::

    tau(k')  = sum_r (1 + min(a_r, k')) / rounds     tokens a request gains per step
    dbar(k') = sum_r min(k_r, k') / rounds           draft tokens it sends to verify per step

so tau(k') = 1 + sum_{i<=k'} p_i with p_i the per-position acceptance (acceptance_positions:
the share of rounds accepted up to position i), tau(0) = 1 and dbar(0) = 0. This
**assumes** (1) the draft's proposals at positions <= k' do not depend on k (true of
ngram and of a draft model run greedily; not of a drafter whose proposal length adapts),
(2) a round that proposed k_r < k' would still have proposed only k_r, (3) the rounds'
mix (where in the output they start) is the same at k' as at k, and (4) acceptance does
not depend on the concurrency level (it is pooled over levels). k' above the captured k is
not predicted.

**Step cost.** Least-squares fits over the decode-only engine steps (int_plan_steps; both
arms, every level; ``fit.py``)::

    verify_ms(B, D) = v0 + v1 * B + v2 * D        B requests in the step, D draft tokens verified
    draft_ms(B, k)  = d0 + d1 * B + d2 * B * k    (steps where a drafter ran)

A term the data cannot tell apart from the others (D constant, one k captured) is not
fitted and counts 0: with one captured k the draft cost does not depend on k.

**Prediction** for k', a level whose decode steps hold B requests on average (the
baseline arm's mean decode batch size at the level; the level's concurrency when not
measured), and a category, its batch assumed all of that category::

    step_ms(k', B)   = verify_ms(B, B * dbar(k')) + (draft_ms(B, k') if k' > 0 else 0)
    tokens_per_s     = 1000 * tau(k') / step_ms(k', B)        per request [tokens/s]
    system_tokens_per_s = B * tokens_per_s                    [tokens/s]
    speedup(k')      = tokens_per_s(k') / tokens_per_s(0) = tau(k') * step_ms(0, B) / step_ms(k', B)

Intervals: ``bootstrap.py``. Decisions: ``recommend.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RoundSums", "StepCost", "predict", "round_sums"]


@dataclass(frozen=True)
class RoundSums:
    """One category's decode rounds, summed per request for every k' in 0..kmax.

    ``tokens[j, k']`` = sum over request j's rounds of (1 + min(a_r, k')), ``drafts[j, k']`` =
    sum of min(k_r, k'), ``rounds[j]`` its decode rounds, ``cluster[j]`` its repeat (the
    bootstrap's outer level)."""

    tokens: np.ndarray
    drafts: np.ndarray
    rounds: np.ndarray
    cluster: np.ndarray

    def tau(self, weights: np.ndarray | None = None) -> np.ndarray:
        """tau(k') for every k' (``weights``: the requests' bootstrap counts, or None for 1 each)."""
        w = np.ones(len(self.rounds)) if weights is None else weights
        return (w @ self.tokens) / (w @ self.rounds)

    def dbar(self, weights: np.ndarray | None = None) -> np.ndarray:
        w = np.ones(len(self.rounds)) if weights is None else weights
        return (w @ self.drafts) / (w @ self.rounds)


def round_sums(
    request: np.ndarray, k: np.ndarray, a: np.ndarray, n: np.ndarray, cluster: np.ndarray, kmax: int
) -> RoundSums:
    """``RoundSums`` from rows (request index 0..J-1, k_r, a_r, rounds with that (k_r, a_r),
    the request's cluster)."""
    request = np.asarray(request, dtype=np.int64)
    n = np.asarray(n, dtype=float)
    j = int(request.max()) + 1 if len(request) else 0
    # per request, the rounds by accepted count and by proposed count (two bincounts), then
    # tokens[:, k'] = sum_a rounds_a * (1 + min(a, k')) and drafts[:, k'] = sum_k rounds_k * min(k, k')
    width = kmax + 1
    by_a = np.bincount(request * width + np.asarray(a, dtype=np.int64), weights=n, minlength=j * width)
    by_k = np.bincount(request * width + np.asarray(k, dtype=np.int64), weights=n, minlength=j * width)
    grid = np.arange(width)
    tokens = by_a.reshape(j, width) @ (1 + np.minimum(grid[:, None], grid[None, :]))
    drafts = by_k.reshape(j, width) @ np.minimum(grid[:, None], grid[None, :])
    rounds = by_a.reshape(j, width).sum(axis=1)
    clusters = np.zeros(j, dtype=np.int64)
    clusters[request] = np.asarray(cluster, dtype=np.int64)
    return RoundSums(tokens, drafts, rounds, clusters)


@dataclass(frozen=True)
class StepCost:
    """The fitted coefficients (0 for a term not fitted): verify (v0, v1, v2), draft (d0, d1, d2)."""

    verify: tuple[float, float, float]
    draft: tuple[float, float, float]

    def verify_ms(self, batch: float, drafts: np.ndarray | float) -> np.ndarray:
        v0, v1, v2 = self.verify
        return v0 + v1 * batch + v2 * np.asarray(drafts)

    def draft_ms(self, batch: float, k: np.ndarray) -> np.ndarray:
        d0, d1, d2 = self.draft
        k = np.asarray(k)
        return np.where(k > 0, d0 + d1 * batch + d2 * batch * k, 0.0)


def predict(tau: np.ndarray, dbar: np.ndarray, cost: StepCost, batch: float) -> dict[str, np.ndarray]:
    """Per k' (index of ``tau``/``dbar``): step_ms, tokens_per_s, system_tokens_per_s, speedup."""
    k = np.arange(len(tau))
    step = cost.verify_ms(batch, batch * dbar) + cost.draft_ms(batch, k)
    rate = 1000.0 * tau / step
    return {
        "step_ms": step,
        "tokens_per_s": rate,
        "system_tokens_per_s": batch * rate,
        "speedup": rate / rate[0],
    }
