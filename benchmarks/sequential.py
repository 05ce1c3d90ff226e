"""The sequential design against the fixed one (issue 41, items 3 and 4), side by
side on the same synthetic runs, with noise the intervals do NOT assume.

Each synthetic run (``analytics/calibration.py``: the demo's 3 categories x levels 1,
4, 8, 8 prompts a category, the arm order of ``replay/load/schedule.py``, the measured
noise sizes of ``benchmarks/calibration.py``'s SIZES) is drawn at ``--max-repeats``
repeats. The fixed design reads its first ``--fixed`` repeats (the demo's 5); the
sequential one (``analytics/sequential.py``) looks after repeat ``--first`` (2), then after
each repeat, and a level
leaves once every cell at it is decided (``analytics/sequential_calibration.py``).

Scenarios (the departures of benchmarks/calibration.py):
- A/A (every ratio 1.00x) under ``order``, ``t3``, ``slow``, ``all``: the family-wise
  false faster/slower rate (goal <= 5% for both designs), ``equivalent`` at 1.00x;
- one category at 1.10x, 1.20x, 1.50x (the others 1.00x) under ``order`` and ``all``: power;
- ``demo``: code 2.2x, structured 1.5x, chat 1.00x (the demo's own figures) under ``all``.

For each: both designs' rates, the share of the fixed design's decisions (faster, slower,
equivalent) the sequential design reached alike, and its expected repeats per level against
the fixed design's (goal: the fixed design's decisions in at most 60% of its repeats). The
planted method ``no spending`` (the full 5% at every look) must fail the family-wise goal.

Usage:
    nice -n 19 .venv/bin/python benchmarks/sequential.py              # 300 runs a scenario
    nice -n 19 .venv/bin/python benchmarks/sequential.py --runs 100   # quicker, coarser
    # the defaults: the demo's (--fixed 5 --first 2 --max-repeats 5), specdec-replay's:
    nice -n 19 .venv/bin/python benchmarks/sequential.py --fixed 3 --first 3 --max-repeats 6

One JSON line per scenario, then a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from specdec.analytics.calibration import MEASURED, Design, Noise
from specdec.analytics.sequential_calibration import compare

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from calibration import MISFITS  # noqa: E402  (benchmarks/calibration.py: the same departures and sizes)


def _noise(name: str, effect: bool) -> Noise:
    return replace(MEASURED, prompt=dict(MEASURED.prompt) if effect else {}, **MISFITS[name])


def _truth(design: Design, what: str):
    if what == "aa":
        return 1.0
    if what == "demo":
        ratios = {"code": 2.2, "structured": 1.5}
        return {(c, lv): ratios.get(c, 1.0) for c in design.categories for lv in design.levels}
    r = float(what)
    return {(c, lv): (r if c == "code" else 1.0) for c in design.categories for lv in design.levels}


def _run(job: tuple) -> dict:
    name, what, runs, seed, fixed, max_repeats, spend, first = job
    design = Design(repeats=fixed)
    t0 = time.perf_counter()
    r = compare(
        design, _noise(name, what != "aa"), _truth(design, what), runs, max_repeats, seed=seed, spend=spend, first=first
    )
    return {
        "scenario": name,
        "truth": what,
        "method": "sequential" if spend else "no spending (planted)",
        **r.line(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _jobs(runs: int, seed: int, fixed: int, max_repeats: int, first: int) -> list[tuple]:
    jobs = []
    for name in ("order", "t3", "slow", "all"):
        seed += 1
        jobs.append((name, "aa", runs, seed, fixed, max_repeats, True, first))
    for name in ("order", "all"):
        for what in ("1.1", "1.2", "1.5"):
            seed += 1
            jobs.append((name, what, runs, seed, fixed, max_repeats, True, first))
    seed += 1
    jobs.append(("all", "demo", runs, seed, fixed, max_repeats, True, first))
    for name in ("order", "all"):
        seed += 1
        jobs.append((name, "aa", runs, seed, fixed, max_repeats, False, first))
    return jobs


def _table(lines: list[dict]) -> None:
    print(
        f"\n{'method':22} {'scenario':8} {'truth':>5} {'FWER fix':>8} {'seq':>6} {'power fix':>9} {'seq':>6} "
        f"{'equiv fix':>9} {'seq':>6} {'reached':>7} {'repeats':>7} {'ratio':>6}"
    )
    for x in lines:
        power = f"{x['fixed_power']:>9.1%} {x['sequential_power']:>6.1%}" if x["truth"] != "aa" else f"{'':>9} {'':>6}"
        print(
            f"{x['method']:22} {x['scenario']:8} {x['truth']:>5} {x['fixed_false_runs']:>8.1%} "
            f"{x['sequential_false_runs']:>6.1%} {power} {x['fixed_equivalent']:>9.1%} "
            f"{x['sequential_equivalent']:>6.1%} {x['fixed_decisions_reached']:>7.1%} {x['mean_repeats']:>7.2f} "
            f"{x['repeats_ratio']:>6.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="synthetic runs per scenario")
    ap.add_argument("--seed", type=int, default=4100)
    ap.add_argument("--fixed", type=int, default=5, help="the fixed design's repeats (the demo's)")
    ap.add_argument("--max-repeats", type=int, default=5, help="the sequential design's most repeats")
    ap.add_argument("--first", type=int, default=2, help="the sequential design's first look (--repeats)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    lines = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for line in pool.map(_run, _jobs(args.runs, args.seed, args.fixed, args.max_repeats, args.first)):
            print(json.dumps(line), flush=True)
            lines.append(line)
    _table(lines)
    ours = [x for x in lines if x["method"] == "sequential"]
    aa = [x for x in ours if x["truth"] == "aa"]
    fwer = max((x["sequential_false_runs"], x["scenario"]) for x in aa)
    ratio = max((x["repeats_ratio"], x["scenario"], x["truth"]) for x in ours)
    reached = min((x["fixed_decisions_reached"], x["scenario"], x["truth"]) for x in ours if x["truth"] != "aa")
    planted = max(x["sequential_false_runs"] for x in lines if x["method"] != "sequential")
    print(
        f"\n{args.runs} runs a scenario, fixed {args.fixed} repeats, sequential from "
        f"repeat {args.first} up to {args.max_repeats}: "
        f"family-wise false labels under A/A at most {fwer[0]:.1%} ({fwer[1]}) (goal <= 5%); expected repeats "
        f"at most {ratio[0]:.0%} of the fixed design's ({ratio[1]}, {ratio[2]}) (goal <= 60%); the fixed "
        f"design's decisions reached alike in at least {reached[0]:.1%} ({reached[1]}, {reached[2]}); "
        f"planted 'no spending': {planted:.1%} (must exceed 5%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
