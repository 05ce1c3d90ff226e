"""Calibration of the speedup intervals and labels (issue 19), side by side
with the methods they replaced.

Calls the project's own interval and label code (``analytics/intervals.py``,
``analytics/labels.py``) on synthetic runs (``analytics/calibration.py``)
whose noise components come from real runs on this machine, and prints, per
design (repeats) and per-process shift:

- coverage (A/A scenarios: identical arms, so no prompt-specific effect): the
  share of pointwise 95% measurement intervals that hold the truth (goal
  93-97%), per category too;
- family-wise false labels under A/A: the share of runs with any faster /
  slower label when nothing changed (goal <= 5%);
- prompts coverage ("prompts" scenario: each run draws its prompts' effects
  as a sample of the category, spread as measured): the prompts-and-runs
  interval against the category's ratio;
- power: the share of category x level rows labelled faster at true ratios of
  1.10, 1.20 and 1.30, each prompt with its own effect but the prompt set's
  mean at the true ratio (goal >= 80% at 1.20 with the demo's design);
- the calibration check (``analytics/fit.py``): the share of runs in which it
  says a level is noisier than the model allows, beside the old A/A line's,
  under A/A, under monotone host drift common to both arms (+0.044 a repeat
  on the log scale, the demo's baseline drift) and with one level (c4) 3x as
  noisy as the others (goals: at most 10% under drift, at least 80% with the
  noisier level);
- the same for the two planted methods (df counted per level; the old double
  hurdle), which the goals must reject.

Usage:
    .venv/bin/python benchmarks/calibration.py                # the full table (about 10-20 min on 2 cores)
    .venv/bin/python benchmarks/calibration.py --runs 100     # quicker, coarser
    .venv/bin/python benchmarks/calibration.py --estimate runs/A runs/B runs/C   # components of real runs
    .venv/bin/python benchmarks/calibration.py --noise-from runs/A runs/B runs/C # simulate with those

One JSON line per scenario, then a table. The noise used is printed first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from specdec.analytics.calibration import MEASURED, PLANTED, Design, Noise, estimate, evaluate, noise_from

DEMO_REPEATS = Design().repeats  # the demo's design (specdec/demo_design.py)


def _run(job: tuple) -> dict:
    name, design, noise, ratio, runs, seed, method, centred = job
    t0 = time.perf_counter()
    result = evaluate(
        design, noise, ratio, runs, seed=seed, centred=centred, **({"method": PLANTED[method]} if method else {})
    )
    return {
        "scenario": name,
        "method": method or "specdec",
        "repeats": design.repeats,
        "process_sd": noise.process,
        "true_ratio": ratio,
        **result.line(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _noise(base: Noise, process: float, prompt: bool = True, **misfit: Any) -> Noise:
    """``base`` with another process shift; ``prompt=False``: no prompt-specific effect (a true A/A:
    identical arms cannot speed one prompt up and another down); ``misfit``: drift or level_factor."""
    return Noise(
        process=process,
        block=base.block,
        request=dict(base.request),
        prompt=dict(base.prompt) if prompt else {},
        **misfit,
    )


def _estimate(paths: list[str]) -> list[dict]:
    import duckdb

    out = []
    for p in paths:
        db = Path(p) / "specdec.duckdb" if Path(p).is_dir() else Path(p)
        con = duckdb.connect(str(db), read_only=True)
        try:
            out += list(estimate(con).values())
        finally:
            con.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="synthetic runs per scenario (power: half)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--estimate", nargs="+", metavar="RUN", help="print the noise components of built runs and exit")
    ap.add_argument("--noise-from", nargs="+", metavar="RUN", help="simulate with the components of these runs")
    args = ap.parse_args(argv)

    if args.estimate:
        runs = _estimate(args.estimate)
        for path, run in zip(args.estimate, runs):
            for cat, comp in run.items():
                print(json.dumps({"run": path, "category": cat, **{k: round(v, 4) for k, v in comp.items()}}))
        n = noise_from(runs)
        print(
            json.dumps(
                {
                    "pooled": True,
                    "process": round(n.process, 4),
                    "block": round(n.block, 4),
                    "request": {k: round(v, 4) for k, v in n.request.items()},
                    "prompt": {k: round(v, 4) for k, v in n.prompt.items()},
                }
            )
        )
        return 0

    base = noise_from(_estimate(args.noise_from)) if args.noise_from else MEASURED
    print(
        json.dumps(
            {
                "noise": {
                    "process": base.process,
                    "block": base.block,
                    "request": dict(base.request),
                    "prompt": dict(base.prompt),
                },
                "source": "--noise-from " + " ".join(args.noise_from) if args.noise_from else "MEASURED",
            }
        )
    )
    jobs = []
    seed = args.seed
    for repeats in sorted({2, 3, 4, 5, DEMO_REPEATS}):
        for process in (0.0, 0.03, 0.06, 0.10):
            seed += 1
            jobs.append(
                ("A/A", Design(repeats=repeats), _noise(base, process, prompt=False), 1.0, args.runs, seed, None, True)
            )
        seed += 1
        jobs.append(("prompts", Design(repeats=repeats), base, 1.2, args.runs, seed, None, False))
        for ratio in (1.1, 1.2, 1.3):
            seed += 1
            jobs.append(("power", Design(repeats=repeats), base, ratio, max(args.runs // 2, 20), seed, None, True))
    for name, misfit in (
        ("drift", {"drift": 0.044}),
        ("c4 3x", {"level_factor": {4: 3.0}}),
    ):
        seed += 1
        noise = _noise(base, base.process, prompt=False, **misfit)
        jobs.append((name, Design(repeats=DEMO_REPEATS), noise, 1.0, args.runs, seed, None, True))
    for method in PLANTED:
        jobs.append(
            (
                "A/A",
                Design(repeats=DEMO_REPEATS),
                _noise(base, 0.10, prompt=False),
                1.0,
                args.runs,
                args.seed,
                method,
                True,
            )
        )
        jobs.append(
            ("power", Design(repeats=DEMO_REPEATS), base, 1.2, max(args.runs // 2, 20), args.seed, method, True)
        )
    lines = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for line in pool.map(_run, jobs):
            print(json.dumps(line), flush=True)
            lines.append(line)

    print(
        f"\n{'method':22} {'R':>2} {'scenario':8} {'proc':>5} {'ratio':>5} {'cover':>6} {'prompts':>7} "
        f"{'fit!':>5} {'oldA/A!':>7} {'FWER':>5} {'faster':>6}"
    )
    for x in lines:
        print(
            f"{x['method']:22} {x['repeats']:>2} {x['scenario']:8} {x['process_sd']:>5.2f} {x['true_ratio']:>5.2f} "
            f"{x['coverage']:>6.1%} {x['prompts_coverage']:>7.1%} {x['fit_fired']:>5.1%} {x['old_aa_fired']:>7.1%} "
            f"{x['false_label_runs']:>5.1%} {x['faster_share']:>6.1%}"
        )
    ours = [x for x in lines if x["method"] == "specdec"]
    demo = [x for x in ours if x["repeats"] == DEMO_REPEATS]
    worst_cover = min(x["coverage"] for x in demo if x["scenario"] == "A/A")
    best_cover = max(x["coverage"] for x in demo if x["scenario"] == "A/A")
    prompts = next(x["prompts_coverage"] for x in demo if x["scenario"] == "prompts")
    fwer = max(x["false_label_runs"] for x in demo if x["scenario"] == "A/A")
    power = next(x["faster_share"] for x in demo if x["scenario"] == "power" and x["true_ratio"] == 1.2)
    drift = next(x for x in demo if x["scenario"] == "drift")
    noisier = next(x["fit_fired"] for x in demo if x["scenario"] == "c4 3x")
    print(
        f"\ndemo design ({DEMO_REPEATS} repeats): coverage {worst_cover:.1%}-{best_cover:.1%} (goal 93-97%), "
        f"family-wise false labels <= {fwer:.1%} (goal <= 5%), power at 1.20x {power:.1%} (goal >= 80%), "
        f"prompts-and-runs coverage {prompts:.1%}; the calibration check fires in {drift['fit_fired']:.1%} of runs "
        f"under drift (goal <= 10%; the old A/A line: {drift['old_aa_fired']:.1%}) and in {noisier:.1%} with c4 "
        "3x noisier (goal >= 80%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
