"""Is the plan's deployed setting at least as fast as one fixed k, cell by cell? (issue 42's held-out
check: "at least as fast as k = 4 everywhere, within noise").

    python benchmarks/plan_against_k.py RUN PLAN.json [--k 4]

RUN is a ``--sweep-k`` run folder (built: RUN/specdec.duckdb) that swept k = --k and every k the plan
deploys; PLAN.json is ``specdec plan``'s. For each (category, level) the deployed k's requests are
paired with k = --k's by (prompt, repeat) within the run (same prompts, same level, same repeat's
fresh servers), and the ratio e2e(k) / e2e(deployed) (above 1: the deployed setting is faster) is
summarised as its geometric mean with two 95% t intervals: over the pairs (prompts x repeats; it
treats the pairs as independent, so it is too narrow where a repeat's servers shift every pair), and
over the repeats' own geometric means (the unit the verdict's noise model uses; 1 df at 2 repeats).
A deployed k = 0 (the plain pool) is the k0 arm. "within noise" here: the repeats' interval reaches 1
or lies above it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import duckdb

from specdec.analytics.variance import t_quantile


def _interval(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return math.exp(m), math.nan, math.nan
    sd = (sum((v - m) ** 2 for v in values) / (n - 1)) ** 0.5
    h = t_quantile(0.975, n - 1) * sd / n**0.5
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("plan", type=Path)
    ap.add_argument("--k", type=int, default=4)
    a = ap.parse_args()
    plan = json.loads(a.plan.read_text())
    deployed = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")
    con = duckdb.connect(str(a.run / "specdec.duckdb"), read_only=True)
    rows = con.execute(
        "select distinct arm_name, category, level, repeat, prompt_id, e2e_ms from stg_requests where success"
    ).fetchall()
    e2e = {(arm, c, lv, r, p): x for arm, c, lv, r, p, x in rows}
    arms = sorted({k[0] for k in e2e})
    print(f"run {a.run}: arms {', '.join(arms)}; plan {a.plan}; against k = {a.k}")
    print("level category   deployed  e2e(k)/e2e(deployed)  95% over pairs   95% over repeats  within noise")
    worst = []
    for band in deployed["bands"]:
        level = band["level"]
        for cat, k in sorted(band["k"].items()):
            ref, dep = f"k{a.k}", f"k{k}"
            if ref not in arms or dep not in arms:
                print(f"c{level:<4} {cat:10s} k{k:<8} not measured in this run ({ref} or {dep} missing)")
                continue
            logs: list[float] = []
            by_repeat: dict[int, list[float]] = {}
            for (arm, c, lv, r, p), x in e2e.items():
                if arm == ref and c == cat and lv == level and (dep, c, lv, r, p) in e2e:
                    v = math.log(x / e2e[(dep, c, lv, r, p)])
                    logs.append(v)
                    by_repeat.setdefault(r, []).append(v)
            g, lo, hi = _interval(logs)
            _, rlo, rhi = _interval([sum(v) / len(v) for v in by_repeat.values()])
            ok = not (rhi < 1.0)
            worst.append((g, cat, level, ok))
            print(
                f"c{level:<4} {cat:10s} k{k:<8} {g:.3f}                 [{lo:.3f}, {hi:.3f}]   "
                f"[{rlo:.3f}, {rhi:.3f}]    {'yes' if ok else 'NO'}"
            )
    if worst:
        g, cat, level, _ = min(worst)
        print(f"lowest: {cat} at c{level}, {g:.3f}; cells within noise: {sum(w[3] for w in worst)} of {len(worst)}")


if __name__ == "__main__":
    main()
