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

With ``--run RUN --db DB`` it times the command itself instead: ``specdec plan RUN --db DB -o OUT``
(the plan from a database built already: reading the rounds and steps, the bootstrap, the
decisions, the page), ``--times`` times in a row, each a child process whose wall, CPU (user +
system) and peak RSS are printed with the load average; DB is built first from RUN
(``analytics.build.build(RUN, db_path=DB)``, timed the same way) when it does not exist, so RUN
may be read-only (the analytics_scale_data large-run shape at 50M rounds)::

    .venv/bin/python benchmarks/plan_scale.py --run /tmp/sg50/large-run/bench-00 --db /tmp/lr.duckdb --times 3

The first of those calls computes the planner's inputs from the rounds and writes the cache beside
DB (``inputs.cache_path``; removed before it), the others read it. With ``--staging --db DB`` it times
the inputs' staging alone, the old way (the views int_round_counts and int_plan_steps, over int_engine_requests) against
``inputs.STAGE_SQL``, alternately in fresh connections, and checks they give the same rows::

    .venv/bin/python benchmarks/plan_scale.py --staging --db /tmp/lr.duckdb --times 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specdec.analytics.plan import inputs as plan_inputs
from specdec.analytics.plan.bootstrap import predictions
from specdec.analytics.plan.data import DRAFT_TERMS, VERIFY_TERMS, PlanInputs
from specdec.analytics.plan.fit import fit_grouped
from specdec.analytics.plan.predict import round_sums


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


def _child(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall, CPU and peak RSS (this process's other children finished before it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        # the largest child so far (RUSAGE_CHILDREN keeps the maximum over every child waited for)
        "peak_rss_mib_any_child_so_far": round(after.ru_maxrss / 1024),
        "load_avg": [round(x, 1) for x in os.getloadavg()],
    }


#: The planner's inputs as it staged them before: the two views, each recomputed from the rounds.
OLD_STAGE_SQL = (
    f"""create temp table {plan_inputs.ROUNDS_TABLE} as
        select c.run_id, c.category, k.request_id, coalesce(c.repeat, 0) as repeat, c.context_low,
               c.tokens_proposed, c.tokens_accepted, sum(c.rounds) as rounds
        from int_round_counts c
        join (select distinct run_id, request_key, request_id from int_engine_requests where replayed) k
          on k.run_id = c.run_id and k.request_key = c.request_key
        where c.arm = 'speculative' and c.phase = 'decode'
        group by all""",
    f"create temp table {plan_inputs.STEPS_TABLE} as select * from int_plan_steps",
)


#: What both stagings hold: the rounds and the steps (the new staging holds the rounds met beside them)
COMPARED = (f"select * from {plan_inputs.ROUNDS_TABLE}", f"select * from {plan_inputs.STEPS_TABLE}")


def _close(a: list, b: list, rel: float = 1e-12) -> bool:
    """Whether two lists of tables hold the same rows, floats equal to ``rel`` (relative)."""

    def same(x: object, y: object) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=rel)
        return x == y

    return len(a) == len(b) and all(
        len(ta) == len(tb) and all(len(r) == len(q) and all(map(same, r, q)) for r, q in zip(ta, tb))
        for ta, tb in zip(a, b)
    )


def staging(db: Path, times: int) -> None:
    """The planner's inputs staged from ``db`` the old way (the views) and the new (``inputs.STAGE_SQL``),
    alternately, each in a fresh connection: wall and CPU seconds (this process, DuckDB's threads
    included), the ratio, and whether the two give the same rows."""
    import duckdb  # heavy: only in this mode

    def old_staging(con) -> None:
        for sql in OLD_STAGE_SQL:
            con.execute(sql)

    def once(staged) -> tuple[float, float, list]:
        con = duckdb.connect(str(db), read_only=True)
        w, c = time.perf_counter(), time.process_time()
        staged(con)
        took = (time.perf_counter() - w, time.process_time() - c)
        rows = [con.execute(f"select * from ({q}) order by all").fetchall() for q in COMPARED]
        con.close()
        return (*took, rows)

    for i in range(times):
        old_wall, old_cpu, old_rows = once(old_staging)
        new_wall, new_cpu, new_rows = once(plan_inputs.stage)
        print(
            json.dumps(
                {
                    "what": "staging the planner's inputs: the views (old) and inputs.STAGE_SQL (new)",
                    "try": i + 1,
                    "old_wall_s": round(old_wall, 2),
                    "old_cpu_s": round(old_cpu, 2),
                    "new_wall_s": round(new_wall, 2),
                    "new_cpu_s": round(new_cpu, 2),
                    "cpu_ratio_old_over_new": round(old_cpu / new_cpu, 2),
                    "same_rows": old_rows == new_rows,
                    # the same but for the last bits of float sums (DuckDB's parallel sums add in any order)
                    "same_rows_to_1e12": _close(old_rows, new_rows),
                    "load_avg": [round(x, 1) for x in os.getloadavg()],
                }
            ),
            flush=True,
        )


def command(run: Path, db: Path, times: int) -> None:
    if not db.exists():
        build = [
            sys.executable,
            "-c",
            f"from specdec.analytics.build import build; build({str(run)!r}, db_path={str(db)!r})",
        ]
        print(json.dumps({"what": "build", "run": str(run), "db": str(db), **_child(build)}), flush=True)
    exe = str(Path(sys.executable).with_name("specdec"))
    # the first call computes the planner's inputs and writes the cache beside DB; the others read it
    plan_inputs.cache_path(db).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as out:
        for i in range(times):
            cmd = [exe, "plan", str(run), "--db", str(db), "-o", out]
            what = (
                "specdec plan --db, first (inputs computed, cache written)" if i == 0 else "specdec plan --db, cached"
            )
            print(json.dumps({"what": what, "try": i + 1, **_child(cmd)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=800_000)
    ap.add_argument("--replicates", default="100,400")
    ap.add_argument("--run", type=Path, default=None, help="time `specdec plan RUN --db DB` instead")
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--times", type=int, default=3)
    ap.add_argument("--staging", action="store_true", help="with --db: time the inputs' staging, old and new")
    args = ap.parse_args()
    if args.staging:
        if args.db is None:
            ap.error("--staging needs --db")
        staging(args.db, args.times)
        return
    if args.run is not None:
        if args.db is None:
            ap.error("--run needs --db")
        command(args.run, args.db, args.times)
        return
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
