"""The blocks of a sequential run (``ReplayConfig.max_repeats``), repeat by repeat.

The fixed design sends every level ``repeats`` times; a sequential one sends
the first ``repeats`` repeats of every level, then after each repeat asks a
*look* (a function the caller passes: the analytics of the run so far) which
levels are still undecided, and runs the next repeat for those only. The
order is repeat-major (``schedule.repeat_blocks``: arms counterbalanced by
repeat and by the level's index among all the run's levels), with a restart
block before every repeat after the first when the servers are restarted.
After the last repeat come every level's passes, as in the fixed design.

The run ends after the look that leaves no level open, or after the *final*
look: the one after repeat ``max_repeats``, or, with ``budget_minutes``, the
first one after which the next repeat would not fit: the time since the first
timed block plus the next repeat's estimate (``next_repeat_s``) would exceed
the budget. The look is told whether it is final before it is taken. Each
look's answer is recorded with when it was taken (``SequentialLoop.looks``)
and handed to ``save`` at once, so an interrupted run keeps its looks.

A look may also name ``open_arms``: the arms the next repeats still need (in a
sweep, an arm decided below the best k by more than the margin everywhere
leaves: ``analytics.sequential.leave_dominated``). Like levels, arms only
leave; the passes after the last repeat still run every arm.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from specdec.engines.lifecycle import in_thread
from specdec.errors import SpecdecError
from specdec.replay.load.schedule import Block, pass_blocks, repeat_blocks

#: ``look(repeats_done, open_levels, final) -> {"open_levels": [...], ...}``: blocking
#: (it runs in a thread); what it returns must be JSON-able (it goes into the manifest).
Look = Callable[[int, list[int], bool], dict[str, Any]]


@dataclass(frozen=True)
class Design:
    """A sequential design's settings (``ReplayConfig``'s fields of the same names)."""

    levels: list[int]  # every level of the run, in the run's order
    repeats: int  # repeats before the first look (>= 2)
    max_repeats: int  # the most repeats a level runs
    budget_minutes: float | None = None  # minutes of timed blocks; None: no budget


def next_repeat_s(last_repeat_s: float, levels_ran: int, levels_open: int) -> float:
    """Seconds the next repeat is expected to take: the last one's, scaled by the
    number of levels it will run over the number the last one ran. At a look the
    levels still open are the ones the last repeat ran (a look closes levels only
    after it is taken), so there the estimate is the last repeat's time."""
    return last_repeat_s * levels_open / levels_ran if levels_ran else 0.0


def over_budget(elapsed_s: float, next_s: float, budget_minutes: float | None) -> bool:
    """True when the next repeat would end past the budget (never without one)."""
    return budget_minutes is not None and elapsed_s + next_s > budget_minutes * 60


class SequentialLoop:
    """One sequential run's schedule (``blocks``) and its looks (``looks``).

    ``say``: prints one progress line. ``look``: None runs ``max_repeats`` repeats
    of every level (the budget still ends the run early) and records no looks.
    ``looks``: the list the records are appended to (a new one by default).
    ``save(looks)``: called after each look is recorded (the run writes the
    manifest). ``clock``: monotonic seconds (a fake one in tests)."""

    def __init__(
        self,
        design: Design,
        arms: list[str],
        say: Callable[[str], None],
        look: Look | None = None,
        looks: list[dict[str, Any]] | None = None,
        save: Callable[[list[dict[str, Any]]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.design, self.arms, self.say, self.look, self.save, self.clock = design, arms, say, look, save, clock
        self.looks: list[dict[str, Any]] = looks if looks is not None else []
        self.open_arms: list[str] = list(arms)  # the arms the next repeat runs (a look may let some leave)

    async def blocks(self, lossless: bool, sample: bool, restart: bool) -> AsyncGenerator[Block, None]:
        """The run's blocks in order; the next repeat's are made only once the
        caller has run the last one's (and the look after it has answered)."""
        d = self.design
        levels = list(d.levels)
        open_levels = list(levels)
        self.open_arms = list(self.arms)
        first: float | None = None  # when the first timed block started
        for repeat in range(d.max_repeats):
            start = self.clock()
            if repeat and restart:
                yield Block("restart", "", 0, repeat)
            for block in repeat_blocks(open_levels, levels, repeat, self.open_arms):
                first = self.clock() if first is None else first
                yield block
            done = repeat + 1
            if done < d.repeats:
                continue
            now = self.clock()
            elapsed = now - (first if first is not None else start)
            budget_out = over_budget(
                elapsed, next_repeat_s(now - start, len(open_levels), len(open_levels)), d.budget_minutes
            )
            final = done == d.max_repeats or budget_out
            if self.look is not None:
                open_levels = await self._look(done, open_levels, final, elapsed)
            elif budget_out:
                self.say(f"after repeat {done}: {self._spent(elapsed)}; the next repeat would not fit")
            if final or not open_levels:
                break
        for block in pass_blocks(levels, self.arms, lossless, sample):
            yield block

    async def _look(self, done: int, before: list[int], final: bool, elapsed: float) -> list[int]:
        """Take one look, record it (and save the records), say it in one line; the levels it leaves open."""
        assert self.look is not None
        got = await in_thread(self.look, done, list(before), final)
        after = self._open_after(got, before, done)
        arms_before = list(self.open_arms)
        self.open_arms = self._arms_after(got, done, bool(after))
        record = {
            **got,
            "open_levels": after,
            "open_arms": list(self.open_arms),
            "open_arms_before": arms_before,
            "repeat": done,
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "elapsed_s": round(elapsed, 3),
            "final": final,
            "open_levels_before": list(before),
        }
        try:  # the manifest holds it: JSON, no NaN
            json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SpecdecError(
                f"the look after repeat {done} returned a value the manifest cannot hold: {exc}"
            ) from None
        self.looks.append(record)
        if self.save is not None:
            self.save(self.looks)
        self.say(look_line(done, before, after, final, self._spent(elapsed), record))
        return after

    def _open_after(self, got: Any, before: list[int], done: int) -> list[int]:
        """The look's open_levels, in the run's level order; a look can close levels, not open them."""
        listed = got.get("open_levels") if isinstance(got, dict) else None
        if not isinstance(listed, list | tuple) or not all(isinstance(v, int) for v in listed):
            raise SpecdecError(
                f"the look after repeat {done} returned {type(got).__name__} without a list of "
                f"integer open_levels: {got!r:.200}"
            )
        reopened = sorted(set(listed) - set(before))
        if reopened:
            raise SpecdecError(
                f"the look after repeat {done} named level(s) {reopened} open that were not open before it "
                f"(open: {before}): a look closes levels, it does not open them"
            )
        return [level for level in before if level in listed]

    def _arms_after(self, got: dict, done: int, levels_open: bool) -> list[str]:
        """The look's open_arms, in the run's arm order (every open arm where it names none); a
        look can let arms leave, not bring them back, and cannot leave open levels with no arm."""
        listed = got.get("open_arms")
        if listed is None:
            return list(self.open_arms)
        if not isinstance(listed, list | tuple) or not all(isinstance(a, str) for a in listed):
            raise SpecdecError(
                f"the look after repeat {done} returned open_arms that are not arm names: {listed!r:.200}"
            )
        back = sorted(set(listed) - set(self.open_arms))
        if back:
            raise SpecdecError(
                f"the look after repeat {done} named arm(s) {back} open that were not open before it "
                f"(open: {self.open_arms}): a look lets arms leave, it does not bring them back"
            )
        after = [a for a in self.open_arms if a in listed]
        if levels_open and not after:
            raise SpecdecError(f"the look after repeat {done} left levels open but no arm to run them")
        return after

    def _spent(self, elapsed: float) -> str:
        minutes = elapsed / 60
        budget = self.design.budget_minutes
        return f"{minutes:.1f} of {budget:g} min spent" if budget is not None else f"{minutes:.1f} min spent"


def look_line(
    done: int, before: list[int], after: list[int], final: bool, spent: str, record: dict | None = None
) -> str:
    """One progress line per look: e.g. ``look after repeat 3: levels 4, 8 open (level 1
    decided); 6.2 of 20 min spent``, then, where the look lists them (``decided``: entries
    with a ``label``; ``open_cells``), what it decided: ``; this look: 5 faster, 1
    inconclusive; 4 cells open``."""
    decided = [level for level in before if level not in after]
    labels: dict[str, int] = {}
    for entry in (record or {}).get("decided") or ():
        if isinstance(entry, dict) and isinstance(entry.get("label"), str):
            labels[entry["label"]] = labels.get(entry["label"], 0) + 1
    cells = (record or {}).get("open_cells")

    def levels(values: list[int]) -> str:
        return ("level " if len(values) == 1 else "levels ") + ", ".join(map(str, values))

    state = f"{levels(after)} open" if after else "no level open"
    if decided:
        state += f" ({levels(decided)} decided)"
    line = f"look after repeat {done}: {state}; {spent}"
    if labels or isinstance(cells, list):
        said = ", ".join(f"{n} {label}" for label, n in sorted(labels.items())) or "nothing decided"
        line += f"; this look: {said}"
        if isinstance(cells, list):
            line += f"; {len(cells)} cell{'' if len(cells) == 1 else 's'} open"
    left = [a for a in (record or {}).get("open_arms_before") or () if a not in ((record or {}).get("open_arms") or ())]
    if left and after:
        line += f"; arm{'' if len(left) == 1 else 's'} {', '.join(left)} left (none of its cells open)"
    return line + ("; final look" if final else "")
