"""Open-loop arrival plans: which row is sent when, as pure functions.

A plan is a list of ``Arrival`` (row index, intended send time in ms after the
block's start, and the row that must finish first), computed once per level
before anything is sent, so both arms and every repeat get the same plan and
stay paired. ``specdec.replay.load.open_loop`` executes a plan.

* ``recorded_plan``: the rows' recorded clock (``TrafficRow.arrival_ms``),
  shifted so the earliest row is sent at 0 and multiplied by a time scale
  (0.1 = ten times faster: a 60 s recording is sent in 6 s).
* ``poisson_plan``: a Poisson process at a given rate (requests per second):
  the first row at 0, then independent exponential gaps of mean 1/rate, drawn
  from a generator seeded by (seed, rate), so the same arguments always give
  the same times.

Sessions (rows with ``session_id`` and ``turn_index``) go turn by turn: each
turn's ``after`` is the previous turn of its session (by turn index, then
position), and the executor does not send it before that one finished; its
planned time is then a lower bound. The recorded ``messages`` of a later turn
already hold the earlier turns, so both arms send identical prompts whatever
the earlier replies were. In a Poisson plan a session's rows also take the
session's time slots in turn order, so turn n is never planned after turn n+1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow


@dataclass(frozen=True)
class Arrival:
    index: int  # position of the row in the level's rows
    intended_ms: float  # planned send time, ms after the block's start
    after: int | None = None  # index of the row that must finish first (previous turn of the session)


def session_predecessors(rows: Sequence[TrafficRow]) -> list[int | None]:
    """Per row: the index of the previous turn of its session (None for a first
    turn or a row without a session). Turns are ordered by turn_index, then by
    position, so a turn given twice (a cycled mix) is chained, never dropped."""
    after: list[int | None] = [None] * len(rows)
    for chain in _sessions(rows).values():
        for prev, cur in zip(chain, chain[1:]):
            after[cur] = prev
    return after


def _sessions(rows: Sequence[TrafficRow]) -> dict[str, list[int]]:
    """session_id -> row indices in turn order."""
    out: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        if row.session_id is not None:
            out.setdefault(row.session_id, []).append(i)
    for chain in out.values():
        chain.sort(key=lambda i: (rows[i].turn_index, i))
    return out


def recorded_plan(rows: Sequence[TrafficRow], time_scale: float, path: str | Path = "traffic") -> list[Arrival]:
    """Every row at (arrival_ms - earliest arrival_ms) * time_scale; raises
    InputFileError naming the first row without an arrival time (rows counted
    from 1 in the order given, which is the file's order)."""
    if not time_scale > 0:
        raise ValueError(f"time scale must be > 0, got {time_scale}")
    times: list[float] = []
    for i, row in enumerate(rows):
        if row.arrival_ms is None:
            raise InputFileError(
                path,
                f"prompt_id {row.prompt_id!r} has no arrival time: --load recorded replays the rows on "
                "their recorded clock, so every row needs arrival_ms (use --load poisson or closed for "
                "traffic without one)",
                row=i + 1,
                field="arrival_ms",
            )
        times.append(row.arrival_ms)
    if not rows:
        return []
    start = min(times)
    after = session_predecessors(rows)
    return [Arrival(i, (t - start) * time_scale, after[i]) for i, t in enumerate(times)]


def poisson_times(count: int, rate_per_s: float, seed: int) -> list[float]:
    """``count`` send times in ms: 0, then exponential gaps of mean 1000/rate ms."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate_per_s}")
    rng = random.Random(f"specdec-poisson:{seed}:{float(rate_per_s)!r}")
    times, t = [], 0.0
    for n in range(count):
        if n:
            t += rng.expovariate(rate_per_s) * 1000.0
        times.append(t)
    return times


def poisson_plan(rows: Sequence[TrafficRow], rate_per_s: float, seed: int = 0) -> list[Arrival]:
    """Rows in their order at Poisson times; a session's rows take its slots in turn order."""
    times = poisson_times(len(rows), rate_per_s, seed)
    slot_of = list(range(len(rows)))  # row index -> time slot
    for chain in _sessions(rows).values():
        for slot, i in zip(sorted(chain), chain):
            slot_of[i] = slot
    after = session_predecessors(rows)
    return sorted(
        (Arrival(i, times[slot_of[i]], after[i]) for i in range(len(rows))), key=lambda a: (a.intended_ms, a.index)
    )
