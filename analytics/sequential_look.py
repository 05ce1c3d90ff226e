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

from specdec.analytics.sequential import Cell, Key, cells_from_rows, decide, open_levels

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
            rows = con.execute(
                "select comparison, category, concurrency, segment, interval, ci_low, ci_high, ci_level, df "
                "from int_speedup_intervals where interval = 'measurement' and segment is null"
            ).fetchall()
        finally:
            con.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cells_from_rows(rows)


def look_fn(run_dir: Path, max_repeats: int, margin: float, looks_so_far: Sequence[dict]) -> Look:
    """The look of a sequential run in ``run_dir`` (module docstring); ``looks_so_far``: the
    run's looks, read at each call (cells they decided stay decided; the alpha they spent is
    spent)."""

    def look(repeat: int, levels_open: list[int], final: bool) -> dict:
        decided = {
            (d["comparison"], d["category"], int(d["level"])) for past in looks_so_far for d in past.get("decided", ())
        }
        spent_before = max((float(past.get("alpha_spent", 0.0)) for past in looks_so_far), default=0.0)
        cells = {k: c for k, c in _cells(run_dir).items() if k not in decided and k[2] in levels_open}
        found = decide(cells, repeat, max_repeats, spent_before, final, margin)
        out = found.record()
        out["open_levels"] = open_levels(found, levels_open)
        return out

    return look
