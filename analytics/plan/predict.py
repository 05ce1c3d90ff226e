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

**Step cost.** Least-squares fits over the engine steps (``inputs.py``; both arms, every
level; ``fit.py``): verify over every step that decodes, those that prefill a prompt beside
their decode rows included; draft over the decode-only steps (both from int_plan_steps)::

    verify_ms(B, D, P) = v0 + v1 * B + v2 * D + v3 * P   B requests in the step, D draft tokens
                                                         verified, P prompt tokens prefilled
    draft_ms(B, k)     = d0 + d1 * B + d2 * B * k        (steps where a drafter ran)

A term the data cannot tell apart from the others (D constant, one k captured, no step that
prefills beside its decode rows) is not fitted and counts 0: with one captured k the draft
cost does not depend on k.

**Prediction** for k', a level and a category whose rounds were not measured in both arms at
the level (the pooled model; the planner predicts every other cell from what its rounds met,
below). The level's decode steps hold B_0 requests
without speculation and B(k') requests with it (each arm's mean decode batch size at the
level: the baseline arm's; the speculative arm's as the engine ran it at k', measured in each
swept k's arm (a --sweep-k run; a classic run has the captured k only). A k' not swept takes
B linearly interpolated in k between the swept k around it, and below the smallest swept
k > 0 that k's B (``data.PlanInputs.spec_batch_at``); the level's concurrency when no step was
measured). A step's batch holds the run's traffic as it was
mixed, so the drafts it verifies are B * dbar_mix(k'), dbar_mix being dbar pooled over every
category's rounds; the category's own tau says what its requests gain per step::

    step_ms(0)       = verify_ms(B_0, 0)                                     (P = 0)
    step_ms(k')      = verify_ms(B, B * dbar_mix(k')) + draft_ms(B, k')     B = B(k'), k' > 0
    tokens_per_s     = 1000 * tau(k') / step_ms(k')                 per request [tokens/s]
    system_tokens_per_s = B * tokens_per_s                          (B_0 at k' = 0) [tokens/s]
    speedup(k')      = tokens_per_s(k') / tokens_per_s(0) = tau(k') * step_ms(0) / step_ms(k')

(The first version took each cell's batch as all of its category at the baseline's batch
size: on the bundled mix at c8 that charged code 8 x 3.64 drafts per step where the steps held
5.8 requests and 9.1 drafts, and predicted code and structured 9-26% low: BENCHMARKS.md,
"The planner", 2026-12-03.)

**The bias of the pooled prediction at high concurrency (issue 23), and the prediction from
what the rounds met.** On the bundled mix at c8 the pooled prediction over-predicts code and
structured at k = 2 and 4 by 13-21% (every replay so far). Cause, from the steps each category's
decode rounds sat in (BENCHMARKS.md, "Issue 23: the cause of the c8 bias"): (1) the speculative
arm's mean decode batch at c8 (5.8-6.0) is lowered by each block's tail, where the slow chat
requests run nearly alone; code's rounds met 7.9 requests per step, structured's 7.4;
(2) with speculation requests end at different times, so new requests' prompts are prefilled
in steps that also decode: 9-15% of code's and structured's speculative decode rounds at c8
sit in such a step (2.0-2.4 times a decode-only step), against 0.2% in the baseline, whose
fixed-length requests move in lockstep and prefill together; the decode-only fit the pooled
model had then left every step with a prefill out. The step cost ratio (k = 2 over k = 0) for code at c8 was predicted 1.025
and measured 1.21-1.23. (3) The speedup mart's figure is the geometric mean of the requests'
paired e2e ratios, the prediction above a ratio of pooled rates without TTFT; where requests
gain unequally (code at k = 8) the former is the larger, which hid (1) and (2) at k = 8. (4) A
decode round takes longer than its step's verify + draft: 1.0-1.5 ms more at k = 0, 2.4-3.3 ms
with speculation (any k, c1-c8) in the quiet two-repeat replay; 3.4-4.6 and 5.3-8.3 ms in the
sweep, on a busier host (per category and level). Given what each category's rounds met
(``StepsMet``: per arm k, 0 the baseline, and level, the
round-weighted mean batch B_m, drafts verified D_m and prompt tokens prefilled P_m of the steps
they sat in, the category's mean TTFT, and the time per decode round outside verify + draft
O_m; a k' not swept linearly interpolated between the swept k around it, the nearest swept k's
outside them, but its drafts B_m(k') dbar_mix(k') r, r = D_m / (B_m dbar_mix) at the swept k
interpolated the same way: ``met_at``) and a verify fit over every step with a prefill term,
verify_ms(B, D, P) = v0 + v1 B + v2 D + v3 P, a cell is predicted as::

    step_ms(k')  = verify_ms(B_m, D_m, P_m) + draft_ms(B_m, k') + O_m     (D_m = 0 at k' = 0)
    e2e_j(k')    = TTFT(k') + rounds_j(k') * step_ms(k')             request j (rounds_j(0) = tokens_j)
    speedup(k')  = exp(mean_j ln(e2e_j(0) / e2e_j(k')))              the mart's definition

(``predict_met``; ``bootstrap.predictions(met=...)``). The planner reads these inputs
(``data.rounds_met``, staged with the steps by ``inputs.py``): k = 0 the planned run's baseline
arm, k > 0 each analysis run of the run folder at the k it captured, each over the category's
successful requests. Against the two-repeat replay the shipped plan of the sweep: median
absolute error 3.6% (5.2% with the pooled model), coverage 27 of 27; code/structured at c8,
k 2/4: +4.6/+3.0/+6.3/+8.2% (docs/plan.md).

Intervals: ``bootstrap.py``. Decisions: ``recommend.py``.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace

import numpy as np

__all__ = ["RoundSums", "StepCost", "StepsMet", "met_at", "met_step_ms", "predict", "predict_met", "round_sums"]


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
    """The fitted coefficients (0 for a term not fitted): verify (v0, v1, v2[, v3]), draft (d0, d1, d2).
    v3 [ms per prompt token] is the cost of the prompt tokens a step prefills beside its decode rows;
    absent (a fit over decode-only steps) it counts 0."""

    verify: tuple[float, ...]
    draft: tuple[float, float, float]

    def verify_ms(
        self, batch: np.ndarray | float, drafts: np.ndarray | float, prefill: np.ndarray | float = 0.0
    ) -> np.ndarray:
        v0, v1, v2, *rest = self.verify
        v3 = rest[0] if rest else 0.0
        return v0 + v1 * batch + v2 * np.asarray(drafts) + v3 * np.asarray(prefill)

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


@dataclass(frozen=True)
class StepsMet:
    """What one category's decode rounds met in one arm (k, 0 for the baseline) at one level: the
    round-weighted means of their steps' batch size, draft tokens verified and prompt tokens
    prefilled (each step counted once per round of the category in it), the category's mean
    TTFT [ms], and the time per decode round outside the step's verify and draft [ms]: the
    category's requests' decode time (e2e - TTFT) less the verify and draft ms of their decode
    rounds, over those rounds."""

    batch: float
    drafts: float
    prefill_tokens: float
    ttft_ms: float
    overhead_ms: float = 0.0


def met_at(by_k: dict[int, StepsMet], k: int, dbar_mix: np.ndarray | None = None) -> tuple[StepsMet, str]:
    """``StepsMet`` at k > 0 from the arms measured (``by_k``: k -> met, k = 0 the baseline, not used
    here) and how: 'measured' at a swept k, 'interpolated' linearly in k between the swept k around
    it, 'nearest' outside them (the smallest or largest swept k's). With ``dbar_mix`` (the mix's
    drafts per request per step, indexed by k'), the drafts at a k' not swept are
    B(k') dbar_mix(k') r(k'), r = D / (B dbar_mix(k)) at the swept k interpolated the same way (r
    says how the drafts the category's rounds met differ from the mix's pooled figure): a k' below
    the smallest swept k is not charged that k's drafts."""
    swept = sorted(kk for kk in by_k if kk > 0)
    if not swept:
        raise ValueError("no speculative arm measured")
    if k in by_k:
        return by_k[k], "measured"
    below, above = [kk for kk in swept if kk < k], [kk for kk in swept if kk > k]
    if not below or not above:
        near = above[0] if not below else below[-1]
        lo, hi, f, how = near, near, 0.0, "nearest"
    else:
        lo, hi = below[-1], above[0]
        f, how = (k - lo) / (hi - lo), "interpolated"
    a, b = by_k[lo], by_k[hi]
    met = StepsMet(*(x + (y - x) * f for x, y in zip(astuple(a), astuple(b))))
    known = dbar_mix is not None and max(hi, k) < len(dbar_mix) and dbar_mix[lo] > 0 and dbar_mix[hi] > 0
    if known:
        assert dbar_mix is not None
        ra, rb = a.drafts / (a.batch * dbar_mix[lo]), b.drafts / (b.batch * dbar_mix[hi])
        met = replace(met, drafts=met.batch * dbar_mix[k] * (ra + (rb - ra) * f))
    return met, how


def met_step_ms(cost: StepCost, met: list[StepsMet], ks: np.ndarray) -> np.ndarray:
    """step_ms(k') = verify_ms(B, D, P) + draft_ms(B, k') + overhead at what the rounds met (D = 0 at
    k' = 0): the time a decode round takes."""
    k = np.asarray(ks)
    b = np.array([m.batch for m in met])
    d = np.where(k > 0, [m.drafts for m in met], 0.0)
    p = np.array([m.prefill_tokens for m in met])
    return cost.verify_ms(b, d, p) + cost.draft_ms(b, k) + np.array([m.overhead_ms for m in met])


def predict_met(
    tau: np.ndarray,
    tokens: np.ndarray,
    rounds: np.ndarray,
    cost: StepCost,
    met: list[StepsMet],
    ks: np.ndarray,
) -> dict[str, np.ndarray]:
    """The prediction from the steps the category's rounds met (``met``, one per entry of ``ks``; the
    first k' = 0, the baseline's). ``tokens``/``rounds``: per request (rows) and k' (columns, as
    ``ks``) of the category's captured requests. Returns what ``predict`` does, with ``speedup``
    the geometric mean over the requests of their e2e ratio (the speedup mart's definition) and
    ``speedup_of_rates`` the ratio of the pooled rates."""
    step = met_step_ms(cost, met, ks)
    b = np.array([m.batch for m in met])
    ttft = np.array([m.ttft_ms for m in met])
    rate = 1000.0 * tau / step
    # request j: e2e(k') = TTFT(k') + rounds_j(k') step_ms(k'); its baseline e2e: TTFT(0) + tokens_j step_ms(0)
    e2e = ttft[None, :] + rounds * step[None, :]
    base = ttft[0] + tokens[:, 0] * step[0]
    return {
        "step_ms": step,
        "tokens_per_s": rate,
        "system_tokens_per_s": b * rate,
        "speedup": np.exp(np.log(base[:, None] / e2e).mean(axis=0)),
        "speedup_of_rates": rate / rate[0],
    }
