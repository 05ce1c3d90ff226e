"""``specdec compare RUN_A RUN_B``: two runs' marts side by side, with the
differences, for the questions analysts ask across runs: did a new draft
model, engine version or host change acceptance, the speedup, its label?

Two run folders (``compare``): each run's database is rebuilt from its files
first (``build``), so both are current; then both are attached read-only to
one in-memory DuckDB. Two runs of one many-run database (``compare_in``,
``specdec compare --in PATH RUN_ID_A RUN_ID_B``): PATH is built once and
attached. Either way each side is one run's rows of the marts (every mart is
keyed by run_id), joined on the marts' other keys. What is compared:

* settings: every manifest field that differs (model, dtype, engine, arms'
  speculative settings, levels, traffic file hash, host ...), so a difference
  in figures can be read against a difference in conditions;
* speedup (mart ``speedup``): per category and level, each run's speedup,
  family-wise interval (the one its label reads) and label, ``b_over_a`` = B /
  A, ``overlap`` (the two intervals share a point: a difference the runs' own
  noise can explain),
  and ``label_changed``;
* acceptance (mart ``acceptance``, speculative arm): per category, each run's
  mean acceptance length and acceptance rate and B - A;
* acceptance from the engines' per-request stats (mart ``acceptance_requests``):
  per category and level, each run's rate and B - A (the one acceptance an
  engine without per-round rows, llama.cpp, has);
* throughput (mart ``throughput``): per arm and level, output tokens/s of each
  run and B / A.

A group present in one run only is kept, with NULL on the other side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec.analytics.build import build, manifest_of
from specdec.analytics.report.summary import ci_text, term, text_table
from specdec.errors import SpecdecError
from specdec.runfolder import read_manifest

__all__ = ["Comparison", "compare", "compare_in", "settings_diff", "render_text"]

SPEEDUP = """
    select coalesce(a.category, b.category) as category, coalesce(a.level, b.level) as level,
           a.speedup as a_speedup, a.ci_low as a_ci_low, a.ci_high as a_ci_high, a.label as a_label,
           b.speedup as b_speedup, b.ci_low as b_ci_low, b.ci_high as b_ci_high, b.label as b_label,
           b.speedup / a.speedup as b_over_a,
           case when a.ci_low is null or b.ci_low is null then null
                else a.ci_low <= b.ci_high and b.ci_low <= a.ci_high end as overlap,
           a.label is distinct from b.label as label_changed
    from {a_speedup} a full join {b_speedup} b on a.category = b.category and a.level = b.level
"""
ACCEPTANCE = """
    select coalesce(a.category, b.category) as category,
           a.mean_acceptance_length as a_length, b.mean_acceptance_length as b_length,
           b.mean_acceptance_length - a.mean_acceptance_length as length_b_minus_a,
           a.acceptance_rate as a_rate, b.acceptance_rate as b_rate,
           b.acceptance_rate - a.acceptance_rate as rate_b_minus_a
    from (select * from {a_acceptance} where arm = 'speculative') a
    full join (select * from {b_acceptance} where arm = 'speculative') b on a.category = b.category
"""
#: The engines' own per-request stats (mart acceptance_requests): the one acceptance every
#: engine has, so a run without per-round rows (llama.cpp) compares too.
REQUEST_ACCEPTANCE = """
    select coalesce(a.category, b.category) as category, coalesce(a.level, b.level) as level,
           a.acceptance_rate as a_rate, b.acceptance_rate as b_rate,
           b.acceptance_rate - a.acceptance_rate as rate_b_minus_a,
           a.tokens_proposed as a_proposed, b.tokens_proposed as b_proposed
    from (select * from {a_acceptance_requests} where arm = 'speculative') a
    full join (select * from {b_acceptance_requests} where arm = 'speculative') b
      on a.category = b.category and a.level = b.level
"""
THROUGHPUT = """
    select coalesce(a.arm, b.arm) as arm, coalesce(a.level, b.level) as level,
           a.output_tokens_per_s as a_tokens_per_s, b.output_tokens_per_s as b_tokens_per_s,
           b.output_tokens_per_s / a.output_tokens_per_s as b_over_a
    from {a_throughput} a full join {b_throughput} b on a.arm = b.arm and a.level = b.level
"""


@dataclass(frozen=True)
class Comparison:
    run_a: str
    run_b: str
    settings: list[dict]  # field, a, b
    speedup: list[dict]
    acceptance: list[dict]
    throughput: list[dict]
    request_acceptance: Sequence[dict] = ()


def _flatten(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


#: Manifest fields that differ between any two runs and say nothing about conditions.
_IGNORED = ("run_id", "created_wall", "finished", "capture.path", "model_source.")


def settings_diff(manifest_a, manifest_b) -> list[dict]:
    """Every manifest field (flattened, e.g. ``arms[1].speculative_config.num_speculative_tokens``)
    whose value differs, identifiers and timestamps left out."""
    a = _flatten(json.loads(manifest_a.model_dump_json()))
    b = _flatten(json.loads(manifest_b.model_dump_json()))
    out = []
    for key in sorted(set(a) | set(b)):
        if any(key == i or key.startswith(i) for i in _IGNORED):
            continue
        if a.get(key) != b.get(key):
            out.append({"field": key, "a": a.get(key), "b": b.get(key)})
    return out


def _rows(con, sql: str, runs: dict[str, str]) -> list[dict]:
    cur = con.execute(sql, runs)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _tables(con, a_db: str, b_db: str, runs: dict[str, str]) -> dict[str, list[dict]]:
    """The three comparisons, side A the rows of run ``runs['a']`` of database
    ``a_db`` (an attached alias), side B likewise."""
    rel = {
        f"{side}_{mart}": f"(select * from {db}.{mart} where run_id = ${side})"
        for side, db in (("a", a_db), ("b", b_db))
        for mart in ("speedup", "acceptance", "throughput", "acceptance_requests")
    }
    return {
        "speedup": _rows(
            con, f"select * from ({SPEEDUP.format(**rel)}) order by category = '(system)', category, level", runs
        ),
        "acceptance": _rows(con, f"select * from ({ACCEPTANCE.format(**rel)}) order by category", runs),
        "throughput": _rows(con, f"select * from ({THROUGHPUT.format(**rel)}) order by arm, level", runs),
        "request_acceptance": _rows(
            con,
            f"select * from ({REQUEST_ACCEPTANCE.format(**rel)}) order by category = '(all)', category, level",
            runs,
        ),
    }


def compare(run_a: Path, run_b: Path) -> Comparison:
    """Two run folders, each rebuilt first."""
    import duckdb  # heavy: duckdb, imported only when used

    manifest_a, manifest_b = read_manifest(Path(run_a)), read_manifest(Path(run_b))
    db_a, db_b = build(Path(run_a)), build(Path(run_b))
    con = duckdb.connect()
    try:
        con.execute("attach ? as run_a (read_only)", [str(db_a)])
        con.execute("attach ? as run_b (read_only)", [str(db_b)])
        ids = {}
        for key, schema, manifest in (("a", "run_a", manifest_a), ("b", "run_b", manifest_b)):
            held = [r[0] for r in con.execute(f"select run_id from {schema}.stg_manifest order by 1").fetchall()]
            if held != [manifest.run_id]:  # a run of named arms: one analysis run per comparison
                raise SpecdecError(
                    f"run {manifest.run_id} holds {len(held)} comparisons ({', '.join(held)}): "
                    f"name the ones to compare, e.g. specdec compare --in "
                    f"{Path(run_a if key == 'a' else run_b).parent} {held[0]} <other run or "
                    "comparison>"
                )
            ids[key] = manifest.run_id
        tables = _tables(con, "run_a", "run_b", ids)
        return Comparison(run_a=str(run_a), run_b=str(run_b), settings=settings_diff(manifest_a, manifest_b), **tables)
    finally:
        con.close()


def compare_in(path: Path, run_a: str, run_b: str) -> Comparison:
    """Two runs of the database built from ``path`` (a folder of run folders, a lake ...)."""
    import duckdb  # heavy: duckdb, imported only when used

    db = build(Path(path))
    con = duckdb.connect()
    try:
        con.execute("attach ? as runs (read_only)", [str(db)])
        con.execute("use runs")
        manifests = [manifest_of(con, r) for r in (run_a, run_b)]
        for run_id, manifest in zip((run_a, run_b), manifests):
            if manifest is None:
                raise SpecdecError(
                    f"run {run_id!r} has no manifest (only the lake holds it): "
                    "it has no speedup or throughput to compare"
                )
        tables = _tables(con, "runs", "runs", {"a": run_a, "b": run_b})
        return Comparison(run_a=run_a, run_b=run_b, settings=settings_diff(*manifests), **tables)
    finally:
        con.close()


def _num(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def render_text(c: Comparison) -> str:
    lines = [
        f"A: {term(c.run_a)}",
        f"B: {term(c.run_b)}",
        f"settings that differ ({len(c.settings)}; run ids and timestamps left out):",
    ]
    lines += (
        text_table(["field", "A", "B"], [[s["field"], json.dumps(s["a"]), json.dumps(s["b"])] for s in c.settings])
        if c.settings
        else ["  none"]
    )
    lines.append("speedup (the family-wise interval its label reads, label; overlap: the intervals share a point):")
    lines += text_table(
        ["category", "level", "A", "A label", "B", "B label", "B/A", "overlap", "label changed"],
        [
            [
                r["category"],
                f"c{r['level']}",
                _num(r["a_speedup"]) + ci_text(r["a_ci_low"], r["a_ci_high"]),
                r["a_label"] or "n/a",
                _num(r["b_speedup"]) + ci_text(r["b_ci_low"], r["b_ci_high"]),
                r["b_label"] or "n/a",
                _num(r["b_over_a"]),
                "n/a" if r["overlap"] is None else ("yes" if r["overlap"] else "NO"),
                "YES" if r["label_changed"] else "no",
            ]
            for r in c.speedup
        ],
    )
    lines.append("acceptance, speculative arm (pooled mean acceptance length and rate):")
    lines += (
        text_table(
            ["category", "A length", "B length", "B-A", "A rate", "B rate", "B-A"],
            [
                [
                    r["category"],
                    _num(r["a_length"]),
                    _num(r["b_length"]),
                    _num(r["length_b_minus_a"]),
                    _num(r["a_rate"]),
                    _num(r["b_rate"]),
                    _num(r["rate_b_minus_a"]),
                ]
                for r in c.acceptance
            ],
        )
        if c.acceptance
        else ["  none (no captured rounds in either run)"]
    )
    lines.append(
        "acceptance from the engines' per-request stats, speculative arm (rate = accepted / proposed "
        "tokens, per level; mart acceptance_requests):"
    )
    lines += (
        text_table(
            ["category", "level", "A rate", "B rate", "B-A", "A proposed", "B proposed"],
            [
                [
                    r["category"],
                    f"c{r['level']}",
                    _num(r["a_rate"]),
                    _num(r["b_rate"]),
                    _num(r["rate_b_minus_a"]),
                    "n/a" if r["a_proposed"] is None else r["a_proposed"],
                    "n/a" if r["b_proposed"] is None else r["b_proposed"],
                ]
                for r in c.request_acceptance
            ],
        )
        if c.request_acceptance
        else ["  none (neither run's engine reported per-request stats)"]
    )
    lines.append("throughput (output tokens/s, whole level):")
    lines += text_table(
        ["arm", "level", "A", "B", "B/A"],
        [
            [
                r["arm"],
                f"c{r['level']}",
                _num(r["a_tokens_per_s"], 1),
                _num(r["b_tokens_per_s"], 1),
                _num(r["b_over_a"]),
            ]
            for r in c.throughput
        ],
    )
    return "\n".join(lines)
