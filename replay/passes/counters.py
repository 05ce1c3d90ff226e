"""The engine's speculation counters around each untimed pass (the lossless
pass and the sampling pass), so the analysis can tell whether the speculative
arm speculated at all while the pass ran (``sql/intermediate/health/int_passes_checked.sql``).

Why: both passes compare a speculative arm's outputs with the baseline's. A
speculative server that proposed no draft while a pass ran (speculation
switched off, a config that did not take, an ngram drafter that found no
match) answers exactly like the baseline, and its pass would read as
"lossless" without having tested anything. The timed blocks are already
bracketed by counter reads (``MetricSnapshot``); a pass gets its own reads,
kept in a record of their own (``PassCounters``) so that no model of the timed
blocks has to filter them out.

The runner reads the counters (``runner.settled_counters``, which waits until
two reads agree) and hands them here; this module only keeps the rows and
writes one part file per arm, rewritten after every read like the timed
blocks' counters.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from specdec.runfolder import pass_counters_part
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.counters import SPEC_COUNTERS
from specdec.schemas.records import PassCounters

PassKind = Literal["lossless_pass", "sampling_pass"]


class PassCounterLog:
    """Every PassCounters row of a run, per arm, each arm's written to its own part file."""

    def __init__(self, run_id: str, run_dir: Path):
        self.run_id, self.run_dir = run_id, Path(run_dir)
        self.rows: dict[str, list[PassCounters]] = {}

    def record(
        self,
        arm: str,
        level: int,
        pass_kind: PassKind,
        position: Literal["before", "after"],
        counters: dict,
        wall_time_ns: int | None = None,
    ) -> PassCounters:
        """Keep one read (a later read of the same arm, level, pass and position replaces it) and
        rewrite the arm's file. ``counters``: a counter read (``replay/http/metrics.py``'s ``read_counters``);
        a key it lacks is None (the engine does not export it)."""
        row = PassCounters(
            run_id=self.run_id,
            arm=arm,
            level=level,
            pass_kind=pass_kind,
            position=position,
            wall_time_ns=time.time_ns() if wall_time_ns is None else wall_time_ns,
            **{k: counters.get(k) for k in SPEC_COUNTERS},
        )
        rows = [r for r in self.rows.get(arm, []) if (r.level, r.pass_kind, r.position) != (level, pass_kind, position)]
        rows.append(row)
        self.rows[arm] = rows
        write_parquet_atomic(table_from_records(PassCounters, rows), pass_counters_part(self.run_dir, arm))
        return row
