"""A sequential replay's look at its own run folder (``sequential``): the marts built from
the repeats so far into a temporary database (removed afterwards, however the look ends),
the open cells' intervals read from ``int_speedup_intervals``, and the look's decisions.

The replay calls the function ``look_fn`` returns after each repeat from the first look
on (``specdec.replay`` does not import the analytics: the CLI hands it in) with the
repeats done, the levels still open and whether this is the last look; it gets back the
look as the manifest keeps it, with ``open_levels``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from specdec.analytics.sequential import Cell, Key, cells_from_rows, decide, leave_dominated, open_levels
from specdec.arms import analysis_run_id, classic, comparisons, specs_of
from specdec.runfolder import read_manifest

__all__ = ["look_fn"]

Look = Callable[[int, list[int], bool], dict]


def _cells(run_dir: Path) -> dict[Key, Cell]:
    import duckdb

    from specdec.analytics.build import build

    tmp = Path(tempfile.mkdtemp(prefix="specdec-look-"))
    try:
        db = build(run_dir, db_path=tmp / "look.duckdb")
        con = duckdb.connect(str(db), read_only=True)
        try:
            # keyed by the analysis run (the run itself, or <run>/<treatment> for each comparison of
            # named arms): the A/B rows of several comparisons share comparison = 'ab'. Only the
            # rows the verdict labels (those with a family row): the weighted overall speedup has a
            # measurement interval but no label, so it neither shares the error nor holds a level open
            rows = con.execute(
                """select m.run_id, m.category, m.level, m.segment, m.interval, m.ci_low, m.ci_high,
                          m.ci_level, m.df
                   from int_speedup_intervals m
                   where m.interval = 'measurement' and m.segment is null and m.comparison = 'ab'
                     and exists (select 1 from int_speedup_intervals f
                                 where f.interval = 'family' and f.segment is null and f.comparison = 'ab'
                                   and f.run_id = m.run_id and f.category = m.category and f.level = m.level)"""
            ).fetchall()
        finally:
            con.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cells_from_rows(rows)


def _comparisons(run_dir: Path) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The run's arms in order, and each comparison id (as the intervals name it) -> (treatment,
    reference)."""
    manifest = read_manifest(run_dir)
    specs = specs_of(manifest.arms)
    pairs = comparisons(specs)
    if classic(specs):
        return [a.name for a in specs], ({manifest.run_id: (pairs[0].treatment, pairs[0].reference)} if pairs else {})
    return [a.name for a in specs], {
        analysis_run_id(manifest.run_id, c.treatment): (c.treatment, c.reference) for c in pairs
    }


def look_fn(run_dir: Path, max_repeats: int, margin: float, looks_so_far: Sequence[dict]) -> Look:
    """The look of a sequential run in ``run_dir`` (module docstring); ``looks_so_far``: the
    run's looks, read at each call (cells they decided stay decided; the alpha they spent is
    spent). A comparison beaten by another of the same reference by more than the margin at
    every cell leaves (``sequential.leave_dominated``), and ``open_arms`` names the arms the next
    repeat still needs: each treatment with a cell open, and its reference."""

    run_arms: list[tuple[list[str], dict[str, tuple[str, str]]]] = []  # read at the first look, once

    def look(repeat: int, levels_open: list[int], final: bool) -> dict:
        decided = {
            (d["comparison"], d["category"], int(d["level"])) for past in looks_so_far for d in past.get("decided", ())
        }
        spent_before = max((float(past.get("alpha_spent", 0.0)) for past in looks_so_far), default=0.0)
        cells = {k: c for k, c in _cells(run_dir).items() if k not in decided and k[2] in levels_open}
        found = decide(cells, repeat, max_repeats, spent_before, final, margin)
        if not run_arms:  # the arms do not change during a run
            run_arms.append(_comparisons(run_dir))
        arms, pairs = run_arms[0]
        if not final:
            leave_dominated(found, cells, looks_so_far, {c: ref for c, (_t, ref) in pairs.items()}, margin)
        out = found.record()
        out["open_levels"] = open_levels(found, levels_open)
        open_comparisons = {c for c, _cat, _lv in found.open}
        if open_comparisons <= set(pairs):  # else a cell the arms cannot place: every arm stays
            needed = {arm for c in open_comparisons for arm in pairs[c]}
            arms = [a for a in arms if a in needed]
        out["open_arms"] = arms
        return out

    return look
