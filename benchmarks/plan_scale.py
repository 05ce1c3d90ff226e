"""Benchmark: the planner's own compute (``specdec.analytics.plan``) at the request counts of the
scale benchmark, without a database: how long the per-request sums (``model.round_sums``) and the
point predictions with their bootstrap (``bootstrap.predictions``) take, per replicate count,
side by side in one process.

Data: ``--requests`` requests split over three categories, 8 (k, a) groups each with k = 4, a
uniform in 0..4 and 1..19 rounds (the 50-million-round benchmark has ~800k requests; its
int_round_counts has a few (k, a) groups per request), 5 repeats; exact step-cost fits at
levels 1, 4, 8. What it does not time: building the database and reading the rounds from it
(``data.read_inputs``), and the page.

    .venv/bin/python benchmarks/plan_scale.py --requests 800000 --replicates 100,400
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np

from specdec.analytics.plan.bootstrap import predictions
from specdec.analytics.plan.data import DRAFT_TERMS, VERIFY_TERMS, PlanInputs
from specdec.analytics.plan.fit import fit_grouped
from specdec.analytics.plan.model import round_sums


def inputs(requests: int, rng: np.random.Generator) -> tuple[PlanInputs, float]:
    sums, took = {}, 0.0
    for cat in ("code", "structured", "chat"):
        j = requests // 3
        req = np.repeat(np.arange(j), 8)
        a, n, rep = rng.integers(0, 5, len(req)), rng.integers(1, 20, len(req)), rng.integers(0, 5, j)[req]
        t0 = time.perf_counter()
        sums[cat] = round_sums(req, np.full(len(req), 4), a, n, rep, 4)
        took += time.perf_counter() - t0
    grid = [(b, d) for b in range(1, 9) for d in range(0, 33, 4)]
    y = np.array([10 + 2 * b + 0.5 * d for b, d in grid])
    verify = fit_grouped(
        np.array([[1, b, d] for b, d in grid]), VERIFY_TERMS, np.full(len(grid), 100), 100 * y, 100 * y**2 + 100
    )
    yd = np.array([1 + 0.25 * b for b in range(1, 9)])
    draft = fit_grouped(
        np.array([[1, b, 4 * b] for b in range(1, 9)]), DRAFT_TERMS, np.full(8, 100), 100 * yd, 100 * yd**2 + 10
    )
    levels = [1, 4, 8]
    cats = list(sums)
    return (
        PlanInputs(
            "bench",
            cats,
            levels,
            4,
            sums,
            verify,
            draft,
            {lv: float(lv) for lv in levels},
            {lv: True for lv in levels},
            {},
            {c: 128.0 for c in cats},
            {c: 100 for c in cats},
            "vllm",
            None,
            {},
            {},
            {},
        ),
        took,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=800_000)
    ap.add_argument("--replicates", default="100,400")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    inp, sums_s = inputs(args.requests, rng)
    for reps in [int(r) for r in args.replicates.split(",")]:
        t0 = time.perf_counter()
        predictions(inp, [0, 1, 2, 3, 4], replicates=reps)
        print(
            json.dumps(
                {
                    "requests": args.requests,
                    "replicates": reps,
                    "round_sums_s": round(sums_s, 2),
                    "predictions_s": round(time.perf_counter() - t0, 2),
                    "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                    "load_avg": [round(x, 1) for x in os.getloadavg()],
                }
            )
        )


if __name__ == "__main__":
    main()
