"""The planner's throughput model, stated once: what a speculative setting k' yields per
request and per step, from the rounds and step timings one run captured.

**Acceptance at k' <= k (the captured draft re-segmented).** A captured decode round r
proposed k_r draft tokens (0 when the drafter found nothing) and accepted a_r of them (a
prefix: position i is accepted exactly when a_r >= i), so it produced a_r + 1 tokens. Run at
k', the same a_r + 1 tokens come in rounds of at most k' + 1: q_r = floor(a_r / (k' + 1))
rounds that accept all k' drafts, then one that accepts the rest, a_r - q_r (k' + 1), and
stops at the rejected (or missing) draft token, each proposing min(k_r, k') drafts::

    n_r(k')  = floor(a_r / (k' + 1)) + 1                 rounds at k' (n_r(k) = 1; n_r(0) = a_r + 1)
    tau(k')  = sum_r (1 + a_r) / sum_r n_r(k')           tokens a request gains per step
    dbar(k') = sum_r n_r(k') min(k_r, k') / sum_r n_r(k')  draft tokens it sends to verify per step

per category, pooled over the run's levels and repeats (sums over the decode rounds of the
speculative arm's requests); tau(0) = 1, dbar(0) = 0, and at the captured k they are the
captured figures. This **assumes** (1) the draft's proposals at positions <= k' do not
depend on k (true of ngram and of a draft model run greedily; not of a drafter whose proposal
length adapts), (2) a draft accepted from a round's start would also be accepted from any later
position inside it (the drafter keeps following the same continuation, as prompt lookup does
inside a matched span), and a round that proposed k_r < k' would still propose only k_r, and
(3) acceptance does not depend on the concurrency level (it is pooled over levels). k' above
the captured k is not predicted. (An earlier version truncated each round to
1 + min(a_r, k') tokens in one round; that counts a long accepted run as one short round
where k' makes several, and under-predicted tau at k' = 2 and 4 from a k = 8 capture by 12-19%
for code and structured on the bundled mix: BENCHMARKS.md, "The planner", 2026-12-03.)

**Step cost.** Least-squares fits over the decode-only engine steps (int_plan_steps; both
arms, every level; ``fit.py``)::

    verify_ms(B, D) = v0 + v1 * B + v2 * D        B requests in the step, D draft tokens verified
    draft_ms(B, k)  = d0 + d1 * B + d2 * B * k    (steps where a drafter ran)

A term the data cannot tell apart from the others (D constant, one k captured) is not
fitted and counts 0: with one captured k the draft cost does not depend on k.

**Prediction** for k', a level and a category. The level's decode steps hold B_0 requests
without speculation and B(k') requests with it (each arm's mean decode batch size at the
level: the baseline arm's; the speculative arm's as the engine ran it at k', measured in each
swept k's arm (a --sweep-k run; a classic run has the captured k only). A k' not swept takes
B linearly interpolated in k between the swept k around it, and below the smallest swept
k > 0 that k's B (``data.PlanInputs.spec_batch_at``); the level's concurrency when no step was
measured). A step's batch holds the run's traffic as it was
mixed, so the drafts it verifies are B * dbar_mix(k'), dbar_mix being dbar pooled over every
category's rounds; the category's own tau says what its requests gain per step::

    step_ms(0)       = verify_ms(B_0, 0)
    step_ms(k')      = verify_ms(B, B * dbar_mix(k')) + draft_ms(B, k')     B = B(k'), k' > 0
    tokens_per_s     = 1000 * tau(k') / step_ms(k')                 per request [tokens/s]
    system_tokens_per_s = B * tokens_per_s                          (B_0 at k' = 0) [tokens/s]
    speedup(k')      = tokens_per_s(k') / tokens_per_s(0) = tau(k') * step_ms(0) / step_ms(k')

(The first version took each cell's batch as all of its category at the baseline's batch
size: on the bundled mix at c8 that charged code 8 x 3.64 drafts per step where the steps held
5.8 requests and 9.1 drafts, and predicted code and structured 9-26% low: BENCHMARKS.md,
"The planner", 2026-12-03.)

Intervals: ``bootstrap.py``. Decisions: ``recommend.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RoundSums", "StepCost", "predict", "round_sums"]


@dataclass(frozen=True)
class RoundSums:
    """One category's decode rounds, summed per request for every k' in 0..kmax.

    ``tokens[j, k']`` = sum over request j's captured rounds of (1 + a_r) (the same for every k'),
    ``rounds[j, k']`` = sum of n_r(k'), ``drafts[j, k']`` = sum of n_r(k') min(k_r, k'),
    ``cluster[j]`` its repeat (the bootstrap's outer level). ``rounds[:, -1]`` (k' = the
    captured k) are the captured rounds."""

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
    k = np.asarray(k, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64)
    n = np.asarray(n, dtype=float)
    j = int(request.max()) + 1 if len(request) else 0
    # per row (one (k_r, a_r) of a request, n rounds) and k': n_r(k') = a_r // (k' + 1) + 1; then
    # one bincount per k' sums the rows of each request
    grid = np.arange(kmax + 1)
    split = (a[:, None] // (grid[None, :] + 1) + 1) * n[:, None]
    made = np.minimum(k[:, None], grid[None, :]) * split

    def per_request(values: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(request, weights=values[:, i], minlength=j) for i in grid], axis=1)

    rounds = per_request(split)
    drafts = per_request(made)
    tokens = np.repeat(np.bincount(request, weights=(1 + a) * n, minlength=j)[:, None], kmax + 1, axis=1)
    clusters = np.zeros(j, dtype=np.int64)
    clusters[request] = np.asarray(cluster, dtype=np.int64)
    return RoundSums(tokens, drafts, rounds, clusters)


@dataclass(frozen=True)
class StepCost:
    """The fitted coefficients (0 for a term not fitted): verify (v0, v1, v2), draft (d0, d1, d2)."""

    verify: tuple[float, float, float]
    draft: tuple[float, float, float]

    def verify_ms(self, batch: np.ndarray | float, drafts: np.ndarray | float) -> np.ndarray:
        v0, v1, v2 = self.verify
        return v0 + v1 * batch + v2 * np.asarray(drafts)

    def draft_ms(self, batch: np.ndarray | float, k: np.ndarray) -> np.ndarray:
        d0, d1, d2 = self.draft
        k = np.asarray(k)
        return np.where(k > 0, d0 + d1 * np.asarray(batch) + d2 * np.asarray(batch) * k, 0.0)


def predict(
    tau: np.ndarray,
    dbar: np.ndarray,
    cost: StepCost,
    batch: float,
    spec_batch: float | np.ndarray | None = None,
    ks: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per k' (``ks``, the k' of each entry of ``tau``/``dbar``; their index 0, 1, ... when None):
    step_ms, tokens_per_s, system_tokens_per_s, speedup. ``dbar``: the drafts per request of the
    step's batch (the mix's); ``batch``: B_0 (k' = 0); ``spec_batch``: B (k' > 0; one for every k',
    or one per entry), ``batch`` when None. The first entry must be k' = 0."""
    k = np.arange(len(tau)) if ks is None else np.asarray(ks)
    b = np.where(k > 0, batch if spec_batch is None else spec_batch, batch)
    step = cost.verify_ms(b, b * np.where(k > 0, dbar, 0.0)) + cost.draft_ms(b, k)
    rate = 1000.0 * tau / step
    return {
        "step_ms": step,
        "tokens_per_s": rate,
        "system_tokens_per_s": b * rate,
        "speedup": rate / rate[0],
    }
