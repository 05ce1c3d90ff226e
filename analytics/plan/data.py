"""What the planner reads from a built database (``specdec analytics build``): one analysis
run's decode rounds per request (as int_round_counts counts them), its step timings grouped by
their regressors (int_plan_steps: the decode-only steps, and beside them the steps that prefill a
prompt too) and what each category's decode rounds met, all three as ``inputs.py`` stages them;
its measured latency (the latency mart) and its manifest (stg_manifest).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specdec.analytics.labels import DEFAULT_MARGIN
from specdec.analytics.plan.fit import LinearFit, fit_grouped, outlying_blocks
from specdec.analytics.plan.guards import bad_step_times, missing_reference
from specdec.analytics.plan.inputs import MET_TABLE, ROUNDS_TABLE, STEPS_TABLE, stage
from specdec.analytics.plan.noise import MeasurementNoise, pooled_noise
from specdec.analytics.plan.predict import RoundSums, StepsMet, round_sums
from specdec.errors import SpecdecError

__all__ = ["DRAFT_TERMS", "VERIFY_TERMS", "PlanInputs", "analysis_runs", "captured_ks", "read_inputs", "rounds_met"]

VERIFY_TERMS = ("v0_intercept", "v1_per_request", "v2_per_draft_token", "v3_per_prefill_token")
DRAFT_TERMS = ("d0_intercept", "d1_per_request", "d2_per_request_per_k")


@dataclass(frozen=True)
class PlanInputs:
    run_id: str
    categories: list[str]
    levels: list[int]
    captured_k: int
    rounds: dict[str, RoundSums]
    verify_fit: LinearFit
    draft_fit: LinearFit
    #: mean decode batch size per level (baseline arm's decode-only steps; the level when unmeasured)
    batch: dict[int, float]
    batch_measured: dict[int, bool]
    #: (arm, category, level) -> measured p95 TTFT [ms] (the latency mart)
    ttft_p95_ms: dict[tuple[str, str, int], float | None]
    #: category -> mean output tokens per successful request, and successful requests (baseline arm)
    tokens_per_request: dict[str, float]
    requests: dict[str, int]
    engine: str
    speculative_config: dict[str, Any] | None
    #: (category, context_low) -> (decode rounds, tau(k') for k' in 0..captured k): acceptance by context
    #: bucket (int_round_groups' buckets), reported beside the per-category model, not used by it
    by_context: dict[tuple[str, int], tuple[float, list[float]]]
    #: (k, category, level) -> the measured speedup of another analysis run of the same run folder
    #: (a --sweep-k run's other arms) whose speculative arm captured that k: the cross-k check
    other_measured: dict[tuple[int, str, int], tuple[float | None, float | None, float | None]]
    #: (category, level) -> (speedup, pointwise_ci_low, pointwise_ci_high) measured A/B at the captured k
    measured_speedup: dict[tuple[str, int], tuple[float | None, float | None, float | None]]
    notes: list[str] = field(default_factory=list)
    #: mean decode batch size of the speculative arm per swept k > 0 and level (each analysis run of
    #: the run folder at the k its speculative arm proposed; a classic run: the captured k only)
    spec_batch: dict[int, dict[int, float]] = field(default_factory=dict)
    #: category -> the measurement noise of the run folder's speedups (``noise.py``)
    noise: dict[str, MeasurementNoise] = field(default_factory=dict)
    #: (category, level) -> arm k -> what the category's decode rounds met (``model.StepsMet``): k = 0
    #: the planned analysis run's baseline arm, k > 0 the speculative arm of each analysis run of the
    #: run folder at the k it captured (``rounds_met``)
    met: dict[tuple[str, int], dict[int, StepsMet]] = field(default_factory=dict)
    #: what in the capture weakens the evidence itself (a block of steps apart from the others),
    #: shown first on the plan's page; also in ``notes``
    warnings: list[str] = field(default_factory=list)
    #: the run's practical margin (``int_run_settings.margin``, the speedup labels' delta): a smaller k is
    #: preferred to the best one only within it (``recommend.py``)
    margin: float = DEFAULT_MARGIN

    def spec_batch_at(self, k: int, level: int) -> tuple[float, str]:
        """B at (k > 0, level) and how it was had: 'measured' at a swept k; 'interpolated' linearly
        in k between the swept k around it; 'nearest' below the smallest swept k (that k's B: the
        baseline's B_0 is not a speculative batch); 'baseline' (B_0) when no speculative step was
        measured at the level."""
        swept = sorted(kk for kk, by_level in self.spec_batch.items() if level in by_level)
        if not swept:
            return self.batch[level], "baseline"
        at = {kk: self.spec_batch[kk][level] for kk in swept}
        if k in at:
            return at[k], "measured"
        below, above = [kk for kk in swept if kk < k], [kk for kk in swept if kk > k]
        if not below:
            return at[above[0]], "nearest"
        if not above:
            return at[below[-1]], "nearest"
        lo, hi = below[-1], above[0]
        return at[lo] + (at[hi] - at[lo]) * (k - lo) / (hi - lo), "interpolated"


def analysis_runs(con) -> list[str]:
    return [r[0] for r in con.execute("select distinct run_id from stg_manifest order by run_id").fetchall()]


def captured_ks(con) -> dict[str, tuple[str, int]]:
    """analysis run -> (its run folder's id, the largest k its speculative arm proposed in decode)."""
    stage(con)
    rows = con.execute(
        f"""select c.run_id, any_value(m.source_run_id), max(c.tokens_proposed)
            from {ROUNDS_TABLE} c
            join stg_manifest m using (run_id)
            group by c.run_id"""
    ).fetchall()
    return {r[0]: (r[1], int(r[2])) for r in rows}


def choose_run(con, run_id: str | None) -> tuple[str, dict[str, tuple[str, int]]]:
    """The analysis run to plan: ``run_id``, else the only one, else (one run of named arms, e.g.
    a --sweep-k run) the one whose speculative arm captured the largest k. Also every analysis run's
    (source run, captured k)."""
    runs = analysis_runs(con)
    ks = captured_ks(con)
    if run_id is not None:
        if run_id not in runs:
            raise SpecdecError(f"no analysis run {run_id!r} in the database (it has: {', '.join(runs)})")
        if run_id not in ks:
            missing_reference(con, [run_id])
        return run_id, ks
    if not ks:
        missing_reference(con, runs)
    if len(runs) == 1:
        return runs[0], ks
    sources = {src for src, _ in ks.values()}
    if len(sources) != 1:
        raise SpecdecError(f"the database holds {len(runs)} analysis runs ({', '.join(runs)}): name one with --run-id")
    return max(ks, key=lambda r: (ks[r][1], r)), ks


def _measured_speedups(con, run_id: str) -> dict[tuple[str, int], tuple[float | None, float | None, float | None]]:
    """(category, level) -> (speedup, pointwise_ci_low, pointwise_ci_high): the speedup mart's rows of
    one analysis run, the system row left out."""
    return {
        (r[0], r[1]): (r[2], r[3], r[4])
        for r in con.execute(
            """select category, level, speedup, pointwise_ci_low, pointwise_ci_high
               from speedup where run_id = ? and category <> '(system)'""",
            [run_id],
        ).fetchall()
    }


def _request_rows(con, run_id: str) -> dict:
    """The speculative arm's decode rounds summed per (category, request, repeat, k_r, a_r), as
    columns: ``category`` (index into ``categories``, sorted), ``h`` (the request id's hash),
    ``repeat``, ``k``, ``a``, ``n``; sorted by category and hash, so a request's rows are
    contiguous and the order is fixed (the bootstrap's draws follow it). Hashes, not the ids: at
    800k requests fetching and ranking the id strings (dense_rank) cost 2.7-3.2 CPU s, this
    1.4 s (load 12-15). Two ids with one 64-bit hash would count as one request (at 10^6
    requests a chance of about 3e-8)."""
    categories = [
        r[0]
        for r in con.execute(
            f"select distinct category from {ROUNDS_TABLE} where run_id = ? order by category", [run_id]
        ).fetchall()
    ]
    cols = con.execute(
        f"""with grouped as (
                select category, request_id, repeat, tokens_proposed, tokens_accepted, sum(rounds) as n
                from {ROUNDS_TABLE}
                where run_id = ?
                group by all
            ),
            cats as (select unnest(?) as category, generate_subscripts(?, 1) - 1 as c)
            select cats.c as category, hash(grouped.request_id) as h, grouped.repeat,
                   grouped.tokens_proposed as k, grouped.tokens_accepted as a, grouped.n
            from grouped join cats using (category)
            order by cats.c, h""",
        [run_id, categories, categories],
    ).fetchnumpy()
    out: dict = {name: np.asarray(cols[name]) for name in ("category", "h", "repeat", "k", "a", "n")}
    out["categories"] = categories
    return out


def rounds_met(con, run_id: str, folder_ks: dict[str, int]) -> dict[tuple[str, int], dict[int, StepsMet]]:
    """(category, level) -> arm k -> ``StepsMet`` from MET_TABLE: k = 0 the baseline arm of ``run_id``,
    k > 0 the speculative arm of each analysis run of ``folder_ks`` (analysis run -> its captured k,
    the run folder's). Each over the category's decode rounds of its successful requests at that arm
    and level: the round-weighted means of their steps' batch size, drafts verified and prompt
    tokens prefilled; the requests' mean TTFT; and the time per round outside verify + draft, (the
    requests' e2e - TTFT, summed, less their rounds' steps' verify + draft ms) / rounds."""
    rows = con.execute(
        f"""select run_id, arm, level, category, decode_rounds, batch_sum, drafts_sum, prefill_tokens_sum,
                  engine_ms_sum, ttft_ms_mean, decode_ms_sum
           from {MET_TABLE}
           where (run_id = ? and arm = 'baseline') or (list_contains(?, run_id) and arm = 'speculative')""",
        [run_id, sorted(folder_ks)],
    ).fetchall()
    met: dict[tuple[str, int], dict[int, StepsMet]] = {}
    for run, arm, level, cat, n, b, d, p, engine_ms, ttft, decode_ms in rows:
        k = 0 if arm == "baseline" else folder_ks[run]
        if not n or ttft is None or (arm != "baseline" and k <= 0):
            continue
        overhead = (decode_ms - engine_ms) / n if decode_ms is not None and engine_ms is not None else 0.0
        met.setdefault((cat, int(level)), {})[k] = StepsMet(b / n, d / n, p / n, float(ttft), float(overhead))
    return met


def read_inputs(con, run_id: str | None = None, skip_bad: bool = False) -> PlanInputs:
    """Everything the model needs for one analysis run (``choose_run``). In a run of named arms the
    step costs are fitted over every arm of the run folder (each k's steps), the reference arm's
    steps once (from the planned analysis run). A step time that is NaN, infinite or negative is
    refused by file, row and column, or with ``skip_bad`` left out and counted in a note
    (``guards.bad_step_times``)."""
    run_id, all_ks = choose_run(con, run_id)
    notes: list[str] = []
    cols = _request_rows(con, run_id)
    if len(cols["k"]) == 0:
        raise SpecdecError(f"run {run_id!r}: no captured decode rounds of the speculative arm to plan from")
    captured_k = int(cols["k"].max())
    if captured_k <= 0:
        raise SpecdecError(f"run {run_id!r}: the speculative arm never proposed a draft token")
    sums: dict[str, RoundSums] = {}
    for c, cat in enumerate(cols["categories"]):
        m = cols["category"] == c
        # rows sorted by (category, request hash): a request index is its change points' running count
        h = cols["h"][m]
        request = np.cumsum(np.r_[True, h[1:] != h[:-1]]) - 1
        cluster = np.unique(cols["repeat"][m], return_inverse=True)[1]
        sums[cat] = round_sums(request, cols["k"][m], cols["a"][m], cols["n"][m], cluster, captured_k)
    source = all_ks.get(run_id, (run_id, 0))[0]
    if (skipped := bad_step_times(con, run_id, source, skip_bad)) is not None:
        notes.append(skipped)
    steps = con.execute(
        f"""select arm, level, batch_size, drafts_verified, arm_k, steps, verify_steps, verify_ms_sum,
                  verify_ms_sumsq, draft_steps, draft_ms_sum, draft_ms_sumsq, has_prefill, prefill_tokens,
                  has_decode
           from {STEPS_TABLE}
           where run_id = ? or (arm = 'speculative' and source_run_id = ?)""",
        [run_id, source],
    ).fetchall()
    folder_runs = sorted({run_id} | {r for r, (src, _) in all_ks.items() if src == source})
    # the speculative arm's mean decode batch per analysis run (its k) and level (decode-only steps)
    spec_steps = con.execute(
        f"""select run_id, level, sum(batch_size * verify_steps) / sum(verify_steps)
           from {STEPS_TABLE}
           where list_contains(?, run_id) and arm = 'speculative' and verify_steps > 0 and not has_prefill
           group by all""",
        [folder_runs],
    ).fetchall()
    # verify over every step that decodes, those that prefill a prompt beside their decode rows
    # included (P; a step that only prefills is no decode round's step); the draft cost and the mean
    # batches over the decode-only steps
    decoding = [s for s in steps if s[14]]
    verify_x = np.array([[1.0, s[2], s[3], s[13]] for s in decoding]).reshape(-1, len(VERIFY_TERMS))
    verify_groups = (
        np.array([s[6] for s in decoding]),
        np.array([s[7] or 0.0 for s in decoding]),
        np.array([s[8] or 0.0 for s in decoding]),
    )
    verify_fit = fit_grouped(verify_x, VERIFY_TERMS, *verify_groups)
    warnings: list[str] = []
    for o in outlying_blocks(verify_x, VERIFY_TERMS, *verify_groups, [(s[0], s[1], s[4]) for s in decoding]):
        arm, level, k = o.block
        warnings.append(
            f"the {arm} arm's steps at c{level} (k = {k}) took {o.relative_residual:+.0%} against the verify fit "
            f"of every step, where the other arms and levels agree with a fit without them (Tukey's biweight "
            f"over the blocks): a block measured on a disturbed host? It moves the verify fit every prediction "
            f"reads (RMSE {o.rmse_ms:.1f} ms per step with it, {o.rmse_ms_without:.1f} without); consider "
            "replaying that arm at that level again"
        )
    notes.extend(warnings)
    decode_only = [s for s in steps if not s[12]]
    drafted = [s for s in decode_only if s[9]]
    draft_fit = fit_grouped(
        np.array([[1.0, s[2], s[2] * s[4]] for s in drafted]),
        DRAFT_TERMS,
        np.array([s[9] for s in drafted]),
        np.array([s[10] for s in drafted]),
        np.array([s[11] for s in drafted]),
    )
    if verify_fit.steps == 0:
        raise SpecdecError(f"run {run_id!r}: no engine step with verify_ms measured to fit a step cost")
    if "d2_per_request_per_k" not in draft_fit.fitted:
        notes.append("one k captured: the draft cost is fitted as not depending on k (d2 = 0)")
    lat = con.execute(
        """select arm, category, level, ttft_ms_p95, output_tokens, requests_ok
           from latency where run_id = ?""",
        [run_id],
    ).fetchall()
    levels = sorted({r[2] for r in lat if r[0] == "baseline"} & {r[2] for r in lat if r[0] == "speculative"})
    if not levels:
        raise SpecdecError(f"run {run_id!r}: no level has requests of both arms")
    batch, batch_measured = {}, {}
    for level in levels:
        mine = [s for s in decode_only if s[0] == "baseline" and s[1] == level and s[6]]
        n = sum(s[6] for s in mine)
        batch_measured[level] = n > 0
        batch[level] = sum(s[2] * s[6] for s in mine) / n if n else float(level)
    spec_batch: dict[int, dict[int, float]] = {}
    for run, level, mean_batch in spec_steps:
        k_run = all_ks.get(run, (source, 0))[1]
        if k_run > 0 and level in batch and k_run <= captured_k:
            spec_batch.setdefault(k_run, {})[level] = float(mean_batch)
    met = rounds_met(con, run_id, {r: k for r, (src, k) in all_ks.items() if src == source})
    tokens: dict[str, float] = {}
    requests: dict[str, int] = {}
    for cat in sums:
        base = [r for r in lat if r[0] == "baseline" and r[1] == cat]
        requests[cat] = int(sum(r[5] or 0 for r in base))
        tokens[cat] = sum(r[4] or 0 for r in base) / requests[cat] if requests[cat] else 0.0
    ctx = con.execute(
        f"""select category, context_low, tokens_accepted, sum(rounds)
           from {ROUNDS_TABLE} where run_id = ?
           group by all""",
        [run_id],
    ).fetchall()
    by_context: dict[tuple[str, int], tuple[float, list[float]]] = {}
    for key in sorted({(r[0], r[1]) for r in ctx}):
        mine = [(r[2], float(r[3])) for r in ctx if (r[0], r[1]) == key]
        total = sum(n for _, n in mine)
        made = sum((1 + a) * n for a, n in mine)
        taus = [made / sum((a // (k + 1) + 1) * n for a, n in mine) for k in range(captured_k + 1)]
        by_context[key] = (total, taus)
    measured = _measured_speedups(con, run_id)
    noise_rows = con.execute(
        """select category, run_id, pointwise_ci_low, pointwise_ci_high, df, repeats
           from speedup where list_contains(?, run_id) and category <> '(system)'""",
        [folder_runs],
    ).fetchall()
    noise = {cat: pooled_noise(r[1:] for r in noise_rows if r[0] == cat) for cat in sums}
    others = {r: k for r, (src, k) in all_ks.items() if src == source and r != run_id}
    other_measured = {
        (k_other, cat, level): figures
        for other, k_other in others.items()
        for (cat, level), figures in _measured_speedups(con, other).items()
    }
    margin_row = con.execute("select margin from int_run_settings where run_id = ?", [run_id]).fetchone()
    margin = float(margin_row[0]) if margin_row and margin_row[0] is not None else DEFAULT_MARGIN
    manifest_row = con.execute("select manifest, treatment_arm from stg_manifest where run_id = ?", [run_id]).fetchone()
    engine, spec = "vllm", None
    if manifest_row and manifest_row[0]:
        manifest = json.loads(manifest_row[0])
        treatment = manifest_row[1] or "speculative"
        arm = next((a for a in manifest.get("arms", []) if a.get("name") == treatment), None)
        spec = arm.get("speculative_config") if arm else None
        engine = (arm or {}).get("engine") or manifest.get("engine", {}).get("name", "vllm")
    return PlanInputs(
        run_id=run_id,
        categories=list(sums),
        levels=levels,
        captured_k=int(captured_k),
        rounds=sums,
        verify_fit=verify_fit,
        draft_fit=draft_fit,
        batch=batch,
        batch_measured=batch_measured,
        spec_batch=spec_batch,
        noise=noise,
        met=met,
        ttft_p95_ms={(r[0], r[1], r[2]): r[3] for r in lat},
        tokens_per_request=tokens,
        requests=requests,
        engine=str(engine),
        speculative_config=spec,
        by_context=by_context,
        other_measured=other_measured,
        measured_speedup=measured,
        notes=notes,
        warnings=warnings,
        margin=margin,
    )
