"""``specdec plan RUN -o PLAN_DIR``: build the run's database, read what the model needs,
predict every (k', level, category) with intervals, decide, and write ``plan.json``,
``plan.html`` and the engine exports (``vllm_speculative_config.json``,
``llama_cpp_flags.txt`` (each engine's file, ``Engine.deployment``), ``routing.json``, and ``routing_rules.json`` given a rules file).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from specdec.analytics.plan import export
from specdec.analytics.plan.bootstrap import predictions
from specdec.analytics.plan.data import PlanInputs, read_inputs
from specdec.analytics.plan.guards import thin_evidence
from specdec.analytics.plan.inputs import stage
from specdec.analytics.plan.noise import __doc__ as NOISE_DOC
from specdec.analytics.plan.noise import half_width, prediction_interval
from specdec.analytics.plan.predict import __doc__ as MODEL_DOC
from specdec.analytics.plan.recommend import band_ranges, decide, token_weights
from specdec.atomic import atomic_write_text
from specdec.errors import SpecdecError

__all__ = ["PlanConfig", "make_plan", "plan_from_db", "write_plan"]

ASSUMPTIONS = [
    "acceptance at k' <= captured k by re-segmenting each captured round's accepted run into rounds of at most "
    "k' + 1 tokens: the draft's proposals at positions <= k' do not depend on k, a draft accepted from a round's "
    "start would be accepted from any later position in it, and a round that proposed fewer than k' tokens would "
    "still have proposed only those",
    "acceptance per category is pooled over the run's levels and repeats (it does not depend on load)",
    "a category's decode rounds at a level meet the steps they met in the run: per arm (k = 0 the baseline, each "
    "swept k's arm), the round-weighted mean batch size, drafts verified and prompt tokens prefilled of the steps "
    "they sat in, and the time per round outside the step's verify + draft; a k not swept takes them interpolated "
    "linearly between the swept k around it (the nearest swept k's outside them), its drafts scaled by the mix's "
    "drafts per request at that k; its own acceptance says what its requests gain per round",
    "the verify cost is linear in the requests, drafts and prompt tokens of a step (fitted over every step that "
    "decodes, those that prefill beside included); the draft cost over the decode-only steps",
    "the speedup is the geometric mean over the category's captured requests of their e2e ratio (the speedup "
    "mart's definition), each request's e2e its arm's mean TTFT at the level plus its rounds at k times the step "
    "time: TTFT as measured per arm (interpolated in k like the steps)",
    "a cell whose category's rounds were not measured in both arms at its level (the pooled model): its decode "
    "steps hold the baseline arm's mean decode batch without speculation and the speculative arm's at k with it "
    "(a k not swept: interpolated linearly, the smallest swept k's below it), drafts at the mix's pooled rate",
    "the SLO reads the speculative arm's measured p95 TTFT at the captured k for every k > 0 (p95 TTFT is not "
    "predicted)",
    "the traffic-weighted gains weigh categories by output-token share and the load bands equally",
]


@dataclass(frozen=True)
class PlanConfig:
    ks: tuple[int, ...] = tuple(range(9))
    mix: dict[str, float] | None = None
    slo_ttft_p95_ms: float | None = None
    replicates: int = 400
    seed: int = 0
    confidence: float = 0.95
    run_id: str | None = None
    rules: dict | None = None
    #: predict a cell from what its category's decode rounds met where both arms measured them
    #: (``predict.predict_met``); False: the pooled model (``predict.predict``) for every cell
    met: bool = True
    #: leave out step times that are NaN, infinite or negative, counted in a note (``--skip-bad``);
    #: False: such a run is refused, the first bad value named by file, row and column
    skip_bad: bool = False


def plan_from_db(con, config: PlanConfig) -> dict:
    """The plan (plan.json's content) from an open, built database."""
    inputs: PlanInputs = read_inputs(con, config.run_id, config.skip_bad)
    notes = list(inputs.notes)
    ks = sorted({0, *config.ks})
    too_high = [k for k in ks if k > inputs.captured_k]
    if too_high:
        notes.append(
            f"k = {', '.join(map(str, too_high))} not predicted: above the captured k ({inputs.captured_k}); "
            "the capture cannot tell what a longer draft would have been accepted"
        )
    ks = [k for k in ks if k <= inputs.captured_k]
    if len(ks) < 2:
        raise SpecdecError("--k leaves no k > 0 at or below the captured k to plan")
    for level, ok in inputs.batch_measured.items():
        if not ok:
            notes.append(f"c{level}: no baseline decode step measured; its batch size is taken as {level}")
    shares, weights = token_weights(inputs, config.mix)
    pred = predictions(
        inputs,
        ks,
        replicates=config.replicates,
        seed=config.seed,
        confidence=config.confidence,
        met=inputs.met if config.met else None,
    )
    thin = thin_evidence(con, inputs.run_id, inputs.categories, inputs.noise)
    for cat, why in thin.items():
        notes.append(f"{cat}: no k > 0, thin evidence: {why}")
    decided = decide(pred, inputs, weights, config.slo_ttft_p95_ms, thin)
    spec_cats = export.speculative_categories(decided["policies"])
    exports = {
        "engines": export.engine_exports(
            decided["policies"],
            inputs.levels,
            decided["speculative_pool"]["one_k"],
            inputs.speculative_config,
            decided["speculative_pool"]["description"],
        ),
        "routing": export.routing(inputs.categories, spec_cats, config.rules),
    }
    in_sample = _in_sample(pred, inputs)
    cross_k = _compare(
        pred,
        inputs,
        inputs.other_measured,
        f"out of sample for acceptance: the speedup predicted from the k = {inputs.captured_k} capture at the "
        "other k a run of named arms (--sweep-k) measured, against those arms' measured speedup (the step "
        "cost was fitted on every arm's steps, those arms' included)",
    )
    return {
        "run_id": inputs.run_id,
        "validated": False,
        "validation": "not validated by replay (specdec plan RUN --validate replays the plan's k and compares)",
        "engine": inputs.engine,
        "captured_k": inputs.captured_k,
        "ks": ks,
        "levels": inputs.levels,
        "bands": [
            {
                "level": level,
                "batch_sizes": list(r),
                "mean_decode_batch": inputs.batch[level],
                "mean_decode_batch_speculative": {
                    str(k): {"batch": b, "how": how} for k in ks if k > 0 for b, how in [inputs.spec_batch_at(k, level)]
                },
            }
            for level, r in zip(inputs.levels, band_ranges(inputs.levels))
        ],
        "mix": {"request_shares": shares, "token_weights": weights, "given": config.mix is not None},
        "slo_ttft_p95_ms": config.slo_ttft_p95_ms,
        "confidence": config.confidence,
        "measurement_noise": {cat: inputs.noise[cat].as_dict() for cat in inputs.categories if cat in inputs.noise},
        "replicates": config.replicates,
        "seed": config.seed,
        **decided,
        "in_sample_check": in_sample,
        "cross_k_check": cross_k,
        "exports": exports,
        "model": {
            "formulas": MODEL_DOC,
            "prediction_interval": NOISE_DOC,
            "assumptions": ASSUMPTIONS,
            "verify_fit": inputs.verify_fit.summary(),
            "draft_fit": inputs.draft_fit.summary(),
            "steps_met": [
                {"category": cat, "level": level, "k": k, **asdict(m)}
                for (cat, level), by_k in sorted(inputs.met.items())
                for k, m in sorted(by_k.items())
            ]
            if config.met
            else [],
            "acceptance": [
                {
                    "category": cat,
                    "k": k,
                    "tokens_per_step": float(pred.tau[i, c]),
                    "drafts_per_step": float(pred.dbar[i, c]),
                    "requests": int(len(inputs.rounds[cat].rounds)),
                    "decode_rounds": float(inputs.rounds[cat].rounds[:, -1].sum()),
                }
                for c, cat in enumerate(pred.categories)
                for i, k in enumerate(ks)
            ],
            "acceptance_by_context": [
                {
                    "category": cat,
                    "context_low": low,
                    "decode_rounds": n,
                    "tokens_per_step": {str(k): taus[k] for k in ks},
                }
                for (cat, low), (n, taus) in inputs.by_context.items()
            ],
        },
        "notes": notes,
        "warnings": list(inputs.warnings),
    }


def _compare(pred, inputs: PlanInputs, measured: dict, what: str) -> dict:
    """Predicted speedup against measured speedup per (k, category, level) of ``measured``
    ((k, category, level) -> (speedup, pointwise 95% low, high), the speedup mart's): the relative
    error predicted / measured - 1 and whether the prediction interval (``noise.py``, for the run's
    own repeats) holds the measurement; the median absolute error and the coverage overall and per
    category. No noise estimate: no prediction interval, coverage None."""
    e_lo, e_hi = pred.interval("speedup")
    rows = []
    for (k, cat, level), (m, m_lo, m_hi) in sorted(measured.items()):
        if k not in pred.ks or cat not in pred.categories or level not in pred.levels:
            continue
        i, li, c = pred.ks.index(k), pred.levels.index(level), pred.categories.index(cat)
        p = float(pred.point["speedup"][i, li, c])
        noise = inputs.noise.get(cat)
        lo, hi = (None, None)
        if noise is not None:
            lo, hi = prediction_interval(
                p, float(e_lo[i, li, c]), float(e_hi[i, li, c]), noise, noise.repeats, pred.confidence
            )
        rows.append(
            {
                "category": cat,
                "level": level,
                "k": k,
                "predicted": p,
                "predicted_low": lo,
                "predicted_high": hi,
                "expected_low": float(e_lo[i, li, c]),
                "expected_high": float(e_hi[i, li, c]),
                "measured": m,
                "measured_low": m_lo,
                "measured_high": m_hi,
                "relative_error": None if m is None else p / m - 1,
                "covered": None if m is None or lo is None or hi is None else bool(lo <= m <= hi),
                "intervals_overlap": None
                if m_lo is None or m_hi is None or lo is None or hi is None
                else bool(lo <= m_hi and m_lo <= hi),
            }
        )

    def summary(sel: list[dict]) -> dict:
        errors = [abs(r["relative_error"]) for r in sel if r["relative_error"] is not None]
        covered = [r["covered"] for r in sel if r["covered"] is not None]
        return {
            "cells_compared": len(errors),
            "median_absolute_relative_error": float(np.median(errors)) if errors else None,
            "coverage": sum(covered) / len(covered) if covered else None,
            "median_prediction_half_width": half_width(sel),
            "overlap_share": (sum(o) / len(o))
            if (o := [r["intervals_overlap"] for r in sel if r["intervals_overlap"] is not None])
            else None,
        }

    return {
        "what": what,
        "cells": rows,
        **summary(rows),
        "by_category": {cat: summary([r for r in rows if r["category"] == cat]) for cat in pred.categories},
    }


def _in_sample(pred, inputs: PlanInputs) -> dict:
    """The predicted speedup at the captured k against the run's own measured A/B speedup. The
    model was fitted on this run, so this is a consistency check, not a validation."""
    what = (
        "in-sample: the model's speedup at the captured k against this run's measured speedup "
        "(same data the model was fitted on; not a validation by replay)"
    )
    if inputs.captured_k not in pred.ks:
        what = f"not computed: the captured k ({inputs.captured_k}) is not among the k planned"
    measured = {(inputs.captured_k, cat, level): v for (cat, level), v in inputs.measured_speedup.items()}
    return _compare(pred, inputs, measured, what)


def make_plan(run_dir: Path, config: PlanConfig, db: Path | None = None) -> dict:
    """Build ``run_dir``'s database (as ``specdec report`` does) and plan from it; with ``db``, plan
    from that database, built already (``specdec analytics build``), without rebuilding, its
    inputs read from the cache beside it (``inputs.stage``; the first plan of a database writes it)."""
    import duckdb  # heavy: only when planning

    from specdec.analytics.build import build, check_models, watch

    given = db is not None
    if db is None:
        db = build(Path(run_dir))
    elif not Path(db).is_file():
        raise SpecdecError(f"--db {db}: no such database file (specdec analytics build RUN_DIR writes one)")
    con = duckdb.connect(str(db), read_only=True)
    watch(con)  # a signal interrupts its queries (``analytics.build.interruptible``)
    try:
        if given:
            check_models(con, Path(db))  # its marts and views are read with this specdec's queries
            stage(con, Path(db))  # the planner's inputs through the cache beside a database built already
        return plan_from_db(con, config)
    finally:
        con.close()


def write_plan(plan: dict, out_dir: Path) -> list[Path]:
    """plan.json, plan.html and the exports under ``out_dir``; returns the paths written."""
    from specdec.analytics.plan.page import render  # heavy: altair

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "plan.json": json.dumps(plan, indent=2, allow_nan=False),
        **{e["file_name"]: e["file_text"] for e in plan["exports"]["engines"].values()},
        "routing.json": json.dumps(plan["exports"]["routing"]["pools"], indent=2),
        "plan.html": render(plan),
    }
    if plan["exports"]["routing"]["rules"] is not None:
        files["routing_rules.json"] = json.dumps(plan["exports"]["routing"]["rules"], indent=2)
    written = []
    for name, text in files.items():
        atomic_write_text(out_dir / name, text)
        written.append(out_dir / name)
    return written
