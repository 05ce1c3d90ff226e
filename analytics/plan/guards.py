"""Input the planner cannot plan from, refused by name before it is used (issue 42, item 5).

* **Step times** that are NaN, infinite or negative (``verify_ms``, ``draft_ms``): the staging
  reads each as not measured and counts it (``inputs.STAGE_SQL``); a run that holds any is refused,
  the first such value named by file, row (counted from 0 in the file) and column, unless the
  planner is told to leave them out (``--skip-bad``): then they are counted in a note.
* **Thin evidence** (``thin_evidence``, issue 42 item 3): a category whose requests are fewer than
  ``MIN_PROMPTS`` distinct prompts (the bootstrap resamples requests: of one prompt it sees no
  request-to-request variation, and its interval is tight for no reason), or without a noise
  estimate (one repeat: no prediction interval), gets no k > 0; the cell says why.
* **No reference arm**: a run of named arms whose arms all speculate (a ``--sweep-k`` without 0)
  has no analysis run that compares a speculative arm with a baseline; it is named as such.
"""

from __future__ import annotations

import json
import re

from specdec.analytics.plan.inputs import STEPS_TABLE
from specdec.errors import InputFileError, SpecdecError

__all__ = ["MIN_PROMPTS", "bad_step_times", "missing_reference", "thin_evidence"]

#: The fewest distinct prompts of a category (its speculative arm's successful requests) for a k > 0
MIN_PROMPTS = 2

_BAD = "not coalesce(isfinite({c}) and {c} >= 0, true)"


def _what(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "infinite"
    return f"negative ({value:g})"


def bad_step_times(con, run_id: str, source: str, skip: bool) -> str | None:
    """Refuse the step times of ``run_id``'s steps (and the run folder ``source``'s speculative arms,
    which the step fit reads) that are NaN, infinite or negative; with ``skip``, the note that
    counts those left out (None: there are none)."""
    verify, draft = con.execute(
        f"""select coalesce(sum(verify_bad), 0), coalesce(sum(draft_bad), 0) from {STEPS_TABLE}
           where run_id = ? or (arm = 'speculative' and source_run_id = ?)""",
        [run_id, source],
    ).fetchone()
    total = int(verify) + int(draft)
    if not total:
        return None
    counts = f"{total} step times NaN, infinite or negative (verify_ms {int(verify)}, draft_ms {int(draft)})"
    if skip:
        return f"{counts} left out of the step-cost fits (--skip-bad): read as not measured"
    advice = f"{counts} in all; the step cost cannot be fitted from them: --skip-bad leaves them out and counts them"
    where = _first_bad_row(con)
    if where is None:
        raise SpecdecError(f"run {run_id!r}: {advice}")
    path, row, column, value = where
    raise InputFileError(path, f"step time {_what(value)}; {advice}", row=row, field=column)


def _first_bad_row(con) -> tuple[str, int, str, float] | None:
    """(file, row, column, value) of the first bad step time in the rounds' Parquet files, read
    from the raw view's file list (None: the rows were copied into the database, or are not found)."""
    row = con.execute("select sql from duckdb_views() where view_name = 'raw_rounds'").fetchone()
    # the view as DuckDB states it: read_parquet(list_value('/a.parquet', ...), ...), or [...] as written
    found = re.search(r"read_parquet\((?:main\.)?(?:list_value\(|\[)(.*?)[\])],", row[0] if row else "", re.S)
    if not found:
        return None
    files = [f.replace("''", "'") for f in re.findall(r"'((?:[^']|'')*)'", found[1])]
    cols = {c: _BAD.format(c=c) for c in ("verify_ms", "draft_ms")}
    hit = con.execute(
        f"""select filename, file_row_number, {cols["verify_ms"]} as bad_verify, verify_ms, draft_ms
           from read_parquet(?, filename = true, file_row_number = true, union_by_name = true)
           where {cols["verify_ms"]} or {cols["draft_ms"]}
           order by filename, file_row_number
           limit 1""",
        [files],
    ).fetchone()
    if hit is None:
        return None
    name, number, bad_verify, verify, draft = hit
    return (name, int(number), "verify_ms", verify) if bad_verify else (name, int(number), "draft_ms", draft)


def missing_reference(con, run_ids: list[str]) -> None:
    """Refuse a run of named arms with no arm to compare against: every analysis run of ``run_ids``
    has a reference arm and no treatment (``arms.role_rows``: arms left out of every comparison)
    and its manifest's arms all speculate."""
    rows = con.execute(
        """select run_id, source_run_id, treatment_arm, manifest from stg_manifest where list_contains(?, run_id)""",
        [run_ids],
    ).fetchall()
    if not rows or any(r[2] is not None or r[3] is None for r in rows):
        return
    for source in sorted({r[1] for r in rows}):
        manifest = json.loads(next(r[3] for r in rows if r[1] == source))
        arms = manifest.get("arms", [])
        if arms and all(a.get("speculative_config") for a in arms):
            names = ", ".join(a.get("name", "?") for a in arms)
            raise SpecdecError(
                f"run {source}: no k0 arm (an arm without speculation) to compare against: its arms ({names}) all "
                "speculate, so no speedup was measured and none can be predicted; a --sweep-k run needs 0 among its "
                "k (e.g. --sweep-k 0,2,4)"
            )


def thin_evidence(con, run_id: str, categories: list[str], noise: dict) -> dict[str, str]:
    """category -> why the evidence is too thin for a k > 0 (absent: enough): fewer than MIN_PROMPTS
    distinct prompts among the speculative arm's successful requests of ``run_id``, or no noise
    estimate (``noise``: category -> ``noise.MeasurementNoise``) and so no prediction interval."""
    prompts = dict(
        con.execute(
            """select category, count(distinct prompt_id) from stg_requests
               where run_id = ? and arm = 'speculative' and success group by category""",
            [run_id],
        ).fetchall()
    )
    out: dict[str, str] = {}
    for cat in categories:
        n = int(prompts.get(cat, 0))
        why = []
        if n < MIN_PROMPTS:
            why.append(
                f"{n} prompt{'s' if n != 1 else ''} in the category (at least {MIN_PROMPTS} needed: the bootstrap "
                "resamples requests, and the repeats of one prompt show no request-to-request variation)"
            )
        est = noise.get(cat)
        if est is None or est.variance is None:
            why.append(f"no prediction interval ({est.how if est is not None else 'no noise estimate'})")
        if why:
            out[cat] = "; ".join(why)
    return out
