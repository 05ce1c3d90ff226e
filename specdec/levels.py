"""How a level is named to a reader: one place for replay's progress, the
report, the verdict and the terminal summary.

A level's key is the ``level`` column of every record (see
``specdec.replay.load.modes``): the concurrency in closed loop, the position from 1
in open loop. A reader needs the setting, not the key: ``c4`` in closed loop,
``0.5 req/s`` for Poisson arrivals, ``time x0.25`` for the recorded clock
played at a quarter of its gaps. The run's manifest carries the key to setting
table (``schedule.load.levels``), so names can be rebuilt from any run folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["level_name", "names_from_load", "name_of"]


def level_name(mode: str, key: int, value: float) -> str:
    """Short name of one level: 'c4', '0.5 req/s', 'time x0.25'."""
    if mode == "poisson":
        return f"{value:g} req/s"
    if mode == "recorded":
        return f"time x{value:g}"
    return f"c{key}"


def names_from_load(load: Mapping[str, Any] | None) -> dict[int, str]:
    """Level key -> name from a manifest's ``schedule.load`` (mode and levels);
    empty for closed loop or a manifest without it (``name_of`` then says c<key>)."""
    if not isinstance(load, Mapping) or load.get("mode", "closed") == "closed":
        return {}
    mode = load["mode"]
    out: dict[int, str] = {}
    for lv in load.get("levels") or []:
        if isinstance(lv, Mapping) and isinstance(lv.get("key"), int) and isinstance(lv.get("value"), (int, float)):
            out[lv["key"]] = level_name(mode, lv["key"], float(lv["value"]))
    return out


def name_of(key: int, names: Mapping[int, str] | None = None) -> str:
    """The name of level ``key``: from ``names`` when it has one, else c<key>."""
    return (names or {}).get(key, f"c{key}")
