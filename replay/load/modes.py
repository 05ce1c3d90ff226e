"""Load modes of a replay (``--load``) and what a *level* means in each.

* ``closed`` (default): stepped concurrency, ``--levels 1,2,4,8``; a level
  keeps exactly C requests in flight until its rows are sent.
* ``recorded``: open loop on the rows' recorded clock (``arrival_ms``), once
  per time scale of ``--time-scale`` (e.g. ``1,0.5,0.25``; 0.1 sends a 60 s
  recording in 6 s). Each level is one pass over the rows.
* ``poisson``: open loop, Poisson arrivals at each rate of ``--rates``
  (requests per second, e.g. ``0.5,1,2``), seeded by ``--arrival-seed``.

The ``level`` column of every record is the level's key. In closed loop
it is the concurrency; in open loop it is the level's position from 1, with
levels ordered by offered load (time scales from slow to fast, i.e. largest
first; rates ascending), so the key still grows with the load and every mart
that groups by ``level`` reads one level per key. The level's own
setting is in ``RequestResult.level_value`` (the concurrency, the time scale
or the rate) beside ``load_mode``, and ``LoadLevel.summary`` gives the key to
setting table for the manifest. Plans are computed once per level before any
request (``plans``), so a traffic file unfit for the mode stops the run before
anything is sent, and both arms and every repeat send the same plan.

Only the timed blocks follow the load mode: warm-up requests, the
lossless pass and the sampling pass stay closed loop (in open loop at a
concurrency equal to the level key), since they measure outputs, not timing.
Closed loop does not order a session's turns (today's behaviour): use an
open-loop mode to replay sessions turn by turn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.errors import SpecdecError
from specdec.levels import level_name
from specdec.replay.load.arrivals import Arrival, poisson_plan, recorded_plan

LOAD_MODES = ("closed", "recorded", "poisson")


@dataclass(frozen=True)
class LoadLevel:
    key: int  # the `level` column: the concurrency (closed) or the position from 1 (open loop)
    mode: str  # closed | recorded | poisson
    value: float  # concurrency, time scale, or rate in requests/s

    @property
    def name(self) -> str:
        """Short name for reports ('c4', '0.5 req/s', 'time x0.25'): ``specdec.levels``."""
        return level_name(self.mode, self.key, self.value)

    @property
    def label(self) -> str:
        return {
            "closed": f"c={self.key}",
            "recorded": f"level {self.key}: time scale {self.value:g}",
            "poisson": f"level {self.key}: {self.value:g} req/s",
        }[self.mode]


def open_levels(mode: str, values: list[float]) -> list[float]:
    """Open-loop settings in level order (increasing load)."""
    return sorted(set(values), reverse=(mode == "recorded"))


def load_levels(cfg) -> list[LoadLevel]:
    """The levels of a ReplayConfig, in the order they run."""
    if cfg.load == "closed":
        return [LoadLevel(c, "closed", float(c)) for c in cfg.levels]
    values = cfg.time_scales if cfg.load == "recorded" else cfg.rates
    return [LoadLevel(i, cfg.load, v) for i, v in enumerate(open_levels(cfg.load, values), start=1)]


def summary(cfg) -> dict:
    """The load mode for the manifest's schedule: mode, seed and level keys."""
    out: dict = {"mode": cfg.load, "levels": [{"key": lv.key, "value": lv.value} for lv in load_levels(cfg)]}
    if cfg.load == "closed":
        out["note"] = "closed loop: each level keeps `key` requests in flight until its rows are sent"
    elif cfg.load == "recorded":
        out["note"] = (
            "open loop on the recorded clock: each row sent at (arrival_ms - earliest) * value "
            "(the time scale); the level column holds the key"
        )
    else:
        out["arrival_seed"] = cfg.arrival_seed
        out["note"] = (
            "open loop, Poisson arrivals at `value` requests/s (first at 0), the same times in "
            "every arm and repeat; the level column holds the key"
        )
    if cfg.load != "closed":
        out["sessions"] = (
            "a later turn of a session is sent only after the previous turn finished "
            "(planned time = lower bound; the wait is session_wait_ms)"
        )
    return out


def plans(cfg, traffic, rows) -> dict[int, list[Arrival] | None]:
    """Level key -> arrival plan (None for closed loop). Raises before anything
    is sent if the traffic does not fit the mode."""
    out: dict[int, list[Arrival] | None] = {}
    if cfg.load == "recorded" and len(rows) > len(traffic.rows):
        raise SpecdecError(
            f"--requests-per-level {len(rows)} is more than the {len(traffic.rows)} rows of "
            f"{traffic.path}: --load recorded sends each recorded row once per level"
        )
    for lv in load_levels(cfg):
        if lv.mode == "recorded":
            out[lv.key] = recorded_plan(rows, lv.value, traffic.path)
        elif lv.mode == "poisson":
            out[lv.key] = poisson_plan(rows, lv.value, cfg.arrival_seed)
        else:
            out[lv.key] = None
    return out


def check_values(values: list[float] | None, what: str) -> list[float] | None:
    """For the config's validators: positive finite numbers, each once."""
    if values is None:
        return None
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise ValueError(f"{what} must be positive finite numbers, got {values}")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} has a value given twice: {values}")
    return values
