"""Calibration of the speedup intervals and labels (issue 41, item 4) on
synthetic runs whose noise the intervals do NOT assume.

Calls the project's own interval and label code (``analytics/intervals.py``,
``analytics/labels.py``, the check in ``analytics/fit.py``) on synthetic runs
(``analytics/calibration.py``) of the demo's fixed design (3 categories x
levels 1, 4, 8 x 5 repeats on fresh servers, 8 prompts a category, the arm
order of ``replay/load/schedule.py``), under each of these departures from
the model, one at a time and all together:

- ``order``: the arm that runs second in a block pair is slower;
- ``drift``: monotone host drift, both arms, through the run;
- ``t3``: block and request noise from Student's t(3), scaled to the same SD;
- ``slow``: a share of blocks (one arm, one level, one repeat) 2-3x slow;
- ``shock``: category-in-block shocks (one category's requests of a block move together);
- ``c4 3x`` / ``c8 4x``: one level's block and request noise 3x / 4x the others';
- ``process 10%``: with the order effect, a per-process shift of 10% (3x the measured one: the
  shared noise the df must count);
- ``all``: order + drift + t3 + slow + shock (and ``all + c4 3x``).

The sizes, and where each comes from, are printed first (``SIZES``). For
each scenario it reports coverage of the pointwise 95% intervals per level
(goal 93-97% at every level), the family-wise false-label rate under A/A
(any faster/slower where nothing changed; goal <= 5%), the share of rows
labelled ``equivalent`` at a true 1.00x (goal >= 50%), the rate at which the
calibration check fires (goal <= 10% under drift alone, >= 80% with a level
3x noisier), and, with an effect in one category only (code at 1.10x, 1.20x,
1.50x; the others at 1.00x), the power: the share of that category's rows
labelled faster (goal >= 80% at 1.20x). The planted methods must fail:
``df counted per level`` (coverage), ``one pooled variance`` (coverage at the
noisier level; it is the model before issue 41: no arm order, no own
variance), ``old double hurdle`` (power), ``rows counted independent`` (power:
the family-wise levels without the correlation of a level's rows, Sidak's step-down, a hair from
the Holm the labels read before 2026-12-07).

Usage:
    nice -n 19 .venv/bin/python benchmarks/calibration.py              # 300 runs a scenario (about 15 min on 2 cores)
    nice -n 19 .venv/bin/python benchmarks/calibration.py --runs 100   # quicker, coarser
    .venv/bin/python benchmarks/calibration.py --estimate runs/A runs/B  # components of built runs, then exit

One JSON line per scenario, then a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from specdec.analytics.calibration import MEASURED, PLANTED, Design, Noise, estimate, evaluate, noise_from

#: Where each size of the simulated noise comes from.
SIZES = {
    "process, block, request, prompt": "calibration.MEASURED: three demo-design runs on a quiet host, 2026-12-07, "
    "estimated robustly (stalls and slow blocks set aside, the arm order fitted, medians across runs)",
    "order 0.04": "the second arm of a block pair 4% slower: the issue's 2-5%; the three runs of 2026-12-07 "
    "(estimate: the second arm's slowdown per series) -2.9% to +4.7%, median +1.2%, so 4% is the harsher case",
    "drift 0.044 a repeat": "the demo's baseline drift (analytics/fit.py, issue 41 item 1)",
    "t(3)": "the issue (heavy tails), block and request noise at the same SD",
    "slow 4% of blocks, 2-3x": "the issue's 2-5% of blocks 2-3x slow (not measured here)",
    "shock 0.03": "assumed: about MEASURED's block SD (0.047), category by category (not measured here)",
    "level 3x / 4x": "the issue: the within-level SD at c4 2.5-4x c8's in the demo's four series",
    "process 10%": "3.8x MEASURED's 0.026: the case where counting the df per level under-covers",
}

ORDER, DRIFT, SHOCK = 0.04, 0.044, 0.03
MISFITS: dict[str, dict] = {
    "plain": {},
    "order": {"order": ORDER},
    "drift": {"drift": DRIFT},
    "t3": {"tails": 3.0},
    "slow": {"slow_share": 0.04},
    "shock": {"shock": SHOCK},
    "c4 3x": {"level_factor": {4: 3.0}},
    "c8 4x": {"level_factor": {8: 4.0}},
    "process 10%": {"process": 0.10},
}
MISFITS["all"] = {k: v for name in ("order", "drift", "t3", "slow", "shock") for k, v in MISFITS[name].items()}
MISFITS["process 10%"] = {**MISFITS["order"], **MISFITS["process 10%"]}
MISFITS["all + c4 3x"] = {**MISFITS["all"], **MISFITS["c4 3x"]}


def _noise(name: str, effect: bool) -> Noise:
    """MEASURED with a scenario's departures; without a prompt-specific effect under A/A."""
    return replace(MEASURED, prompt=dict(MEASURED.prompt) if effect else {}, **MISFITS[name])


def _one_category(design: Design, ratio: float) -> dict:
    return {(c, lv): (ratio if c == "code" else 1.0) for c in design.categories for lv in design.levels}


def _run(job: tuple) -> dict:
    name, ratio, runs, seed, method, margin = job
    design = Design()
    t0 = time.perf_counter()
    truth = 1.0 if ratio == 1.0 else _one_category(design, ratio)
    result = evaluate(
        design,
        _noise(name, ratio != 1.0),
        truth,
        runs,
        seed=seed,
        margin=margin,
        **({"method": PLANTED[method]} if method else {}),
    )
    return {
        "scenario": name,
        "method": method or "specdec",
        "code_ratio": ratio,
        "margin": margin,
        **result.line(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


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


def _jobs(runs: int, seed: int) -> list[tuple]:
    jobs = []
    for name in MISFITS:
        seed += 1
        jobs.append((name, 1.0, runs, seed, None, 0.05))
    for name in ("order", "all"):
        for ratio in (1.1, 1.2, 1.5):
            seed += 1
            jobs.append((name, ratio, runs, seed, None, 0.05))
    seed += 1
    jobs.append(("order", 1.0, runs, seed, None, 0.10))  # the margin equivalence needs at this noise
    for method, scenarios in (
        ("df counted per level", [("process 10%", 1.0), ("all", 1.0)]),
        ("one pooled variance", [("c4 3x", 1.0), ("c8 4x", 1.0), ("order", 1.2)]),
        ("old double hurdle", [("order", 1.2)]),
        ("rows counted independent", [("order", 1.0), ("order", 1.2), ("all", 1.2)]),
    ):
        for name, ratio in scenarios:
            seed += 1
            jobs.append((name, ratio, runs, seed, method, 0.05))
    return jobs


def _table(lines: list[dict]) -> None:
    print(
        f"\n{'method':21} {'scenario':11} {'code':>4} {'marg':>4} {'cover c1':>8} {'c4':>6} {'c8':>6} "
        f"{'FWER':>5} {'power':>6} {'equiv':>6} {'check!':>6}"
    )
    for x in lines:
        cover = [x["coverage_by_level"].get(lv, float("nan")) for lv in Design().levels]
        power = f"{x['power']:6.1%}" if x["code_ratio"] != 1.0 else f"{'':6}"
        print(
            f"{x['method']:21} {x['scenario']:11} {x['code_ratio']:>4.2f} {x['margin']:>4.2f} {cover[0]:>8.1%} "
            f"{cover[1]:>6.1%} {cover[2]:>6.1%} {x['false_label_runs']:>5.1%} {power} "
            f"{x['null_equivalent']:>6.1%} {x['fit_fired']:>6.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="synthetic runs per scenario")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--estimate", nargs="+", metavar="RUN", help="print the noise components of built runs and exit")
    args = ap.parse_args(argv)

    if args.estimate:
        found = _estimate(args.estimate)
        for path, run in zip(args.estimate, found):
            for cat, comp in run.items():
                print(json.dumps({"run": path, "category": cat, **{k: round(v, 4) for k, v in comp.items()}}))
        n = noise_from(found)
        print(
            json.dumps(
                {
                    "pooled": "medians across runs (and categories, for process, block and order)",
                    "process": round(n.process, 4),
                    "block": round(n.block, 4),
                    "order": round(n.order, 4),
                    "request": {c: round(v, 4) for c, v in n.request.items()},
                    "prompt": {c: round(v, 4) for c, v in n.prompt.items()},
                }
            )
        )
        return 0

    print(json.dumps({"sizes": SIZES, "measured": {"process": MEASURED.process, "block": MEASURED.block}}))
    lines = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for line in pool.map(_run, _jobs(args.runs, args.seed)):
            print(json.dumps(line), flush=True)
            lines.append(line)
    _table(lines)
    ours = [x for x in lines if x["method"] == "specdec" and x["margin"] == 0.05]
    aa = [x for x in ours if x["code_ratio"] == 1.0]
    worst = min((min(x["coverage_by_level"].values()), x["scenario"]) for x in ours)
    best = max((max(x["coverage_by_level"].values()), x["scenario"]) for x in ours)
    fwer = max((x["false_label_runs"], x["scenario"]) for x in aa)
    power = {x["scenario"]: x["power"] for x in ours if x["code_ratio"] == 1.2}
    check = {x["scenario"]: x["fit_fired"] for x in aa}
    equiv = {x["scenario"]: x["null_equivalent"] for x in aa}
    print(
        f"\nfixed demo design, {args.runs} runs a scenario: coverage per level {worst[0]:.1%} ({worst[1]}) to "
        f"{best[0]:.1%} ({best[1]}) (goal 93-97%); family-wise false labels under A/A at most {fwer[0]:.1%} "
        f"({fwer[1]}) (goal <= 5%); power at 1.20x in code "
        + ", ".join(f"{k} {v:.1%}" for k, v in power.items())
        + " (goal >= 80%); equivalent at 1.00x "
        + ", ".join(f"{k} {v:.1%}" for k, v in equiv.items())
        + f" (goal >= 50%); the check fires {check['drift']:.1%} under drift (goal <= 10%), "
        f"{check['c4 3x']:.1%} with c4 3x and {check['c8 4x']:.1%} with c8 4x (goal >= 80%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
