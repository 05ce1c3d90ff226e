"""Category mixes of a traffic file: parse and check a mix (``code=0.3,chat=0.7``),
draw a seeded sample (``specdec traffic sample``) and re-weight a file to a mix
(``specdec traffic mix``).

A *unit* is what is drawn: a whole session (all its turns, in turn order) or a
standalone row, so a session is never split. A unit's category is the category
of its first turn (a session whose turns have several categories counts under
its first one; ``sample``/``mix`` say how many such sessions there are).

sample (without replacement; output in the file's order)
  Units in a seeded random order; each is taken if its rows fit the rows
  still wanted. With ``by_category`` the same is done per category with a
  target of round(n x the category's share) rows (largest remainder, so the
  targets sum to n). Sessions may leave the total a little under n; it is
  said.

mix (re-weighting, with replacement when needed)
  Target rows per category: round(n x share) by largest remainder; categories
  with no share are left out. Per category, passes over its units in a seeded
  random order: the first pass takes each unit at most once, each further
  pass takes copies. A copy gets new ids: prompt_id ``<id>~<k>`` (and
  session_id ``<session>~<k>``) for the k-th copy, unique in the output, and
  its content_note says which row it copies. Arrival times: when every row has
  ``arrival_ms``, the output's units are placed on the source's clock: unit i
  of M (in seeded random order) starts at the source's empirical start-time
  quantile i / (M - 1), linearly interpolated between the source's sorted unit
  start times, and a session's later turns keep their offsets from its first.
  So the arrival-rate curve keeps its shape, scaled by M / (source units), and
  no two copies share an arrival time by construction. Otherwise arrival_ms
  stays as drawn (said in the notes).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from specdec.atomic import atomic_write_text
from specdec.errors import SpecdecError
from specdec.schemas.records import TrafficRow
from specdec.schemas.strict import MAX_LABEL_LEN
from specdec.traffic.io import Traffic, write_traffic_parquet

#: How far the shares of a mix may sum from 1 (typing 0.333 three times is fine).
MIX_TOLERANCE = 1e-3
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# ------------------------------------------------------------------ mixes
class MixError(ValueError):
    """A mix that is not usable: the message says why (the CLI names the option)."""


def check_mix(mix: dict[str, float]) -> dict[str, float]:
    """A mix as ``{category: share}``: shares from 0 to 1 that sum to 1 within
    MIX_TOLERANCE; raises MixError saying what is wrong."""
    if not isinstance(mix, dict) or not mix:
        raise MixError("a mix needs at least one category=share")
    for cat, share in mix.items():
        if not isinstance(cat, str) or not cat or cat != cat.strip() or any(ord(c) < 32 for c in cat):
            raise MixError(f"category {cat!r} is not a plain name")
        if (
            isinstance(share, bool)
            or not isinstance(share, (int, float))
            or not math.isfinite(share)
            or not 0 <= share <= 1
        ):
            raise MixError(f"the share of {cat!r} must be a number from 0 to 1, got {share!r}")
    total = math.fsum(mix.values())
    if abs(total - 1) > MIX_TOLERANCE:
        raise MixError(
            f"the shares must sum to 1 (within {MIX_TOLERANCE:g}); "
            f"{' + '.join(f'{v:g}' for v in mix.values())} = {total:.6g}"
        )
    return {cat: float(share) for cat, share in mix.items()}


def parse_mix(text: str) -> dict[str, float]:
    """``code=0.3,chat=0.7`` -> ``{'code': 0.3, 'chat': 0.7}``; raises MixError
    naming the item that is wrong."""
    out: dict[str, float] = {}
    for item in str(text).split(","):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not item.strip():
            raise MixError(f"empty item in {text!r} (write category=share,category=share)")
        if not eq or not name:
            raise MixError(f"{item.strip()!r} is not category=share (e.g. code=0.3)")
        if not _NUMBER.fullmatch(value):
            raise MixError(f"the share of {name!r} must be a number from 0 to 1, got {value!r}")
        if name in out:
            raise MixError(f"category {name!r} is given twice")
        out[name] = float(value)
    return check_mix(out)


def unknown_categories(mix: dict[str, float], categories: list[str]) -> str | None:
    """A message if the mix names categories the traffic does not have, else None."""
    missing = sorted(set(mix) - set(categories))
    if not missing:
        return None
    return (
        f"categor{'y' if len(missing) == 1 else 'ies'} {', '.join(map(repr, missing))} not in the traffic "
        f"(it has: {', '.join(categories)})"
    )


# ------------------------------------------------------------------ units
@dataclass(frozen=True)
class Unit:
    rows: tuple[int, ...]  # indices into the traffic's rows, first turn first
    category: str

    def __len__(self) -> int:
        return len(self.rows)


def units_of(rows: list[TrafficRow]) -> list[Unit]:
    """Sessions (turns in order) and standalone rows, in order of first appearance."""
    groups: dict[object, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(("s", r.session_id) if r.session_id is not None else ("r", i), []).append(i)
    out = []
    for idx in groups.values():
        idx.sort(key=lambda i: (rows[i].turn_index or 0, i))
        out.append(Unit(tuple(idx), rows[idx[0]].category))
    return out


def _mixed_sessions(rows: list[TrafficRow], units: list[Unit]) -> int:
    return sum(1 for u in units if len({rows[i].category for i in u.rows}) > 1)


def _targets(n: int, weights: dict[str, float]) -> dict[str, int]:
    """round(n x w) per key by largest remainder, so they sum to n."""
    total = math.fsum(weights.values())
    exact = {k: n * w / total for k, w in weights.items() if w > 0}
    out = {k: math.floor(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[: n - sum(out.values())]:
        out[k] += 1
    return out


def _fill(units: list[Unit], wanted: int, rng: random.Random) -> list[Unit]:
    """Units in a seeded random order, each taken if it fits the rows still wanted."""
    taken = []
    for u in rng.sample(units, len(units)):
        if len(u) <= wanted:
            taken.append(u)
            wanted -= len(u)
            if wanted == 0:
                break
    return taken


@dataclass
class Drawn:
    """The rows of a sample or mix, with what was done, for the command to say."""

    rows: list[TrafficRow]
    copies: int = 0
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.category] = out.get(r.category, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


# ------------------------------------------------------------------ sample
def draw_rows(traffic: Traffic, n: int, seed: int = 0, by_category: bool = False) -> Drawn:
    rows = traffic.rows
    if n > len(rows):
        raise SpecdecError(
            f"-n {n} is more than the {len(rows)} rows of {traffic.path}; a sample draws without "
            "replacement (`specdec traffic mix` draws with replacement)"
        )
    rng = random.Random(seed)
    units = units_of(rows)
    if by_category:
        targets = _targets(n, {c: float(k) for c, k in traffic.summary()["categories"].items()})
        taken = [
            u for cat in sorted(targets) for u in _fill([u for u in units if u.category == cat], targets[cat], rng)
        ]
    else:
        taken = _fill(units, n, rng)
    out = Drawn([rows[i] for i in sorted(i for u in taken for i in u.rows)])
    if len(out.rows) < n:
        out.notes.append(
            f"{len(out.rows)} rows, not {n}: sessions are kept whole and no other session fits the rows still wanted"
        )
    mixed = _mixed_sessions(rows, units)
    if mixed and by_category:
        out.notes.append(f"{mixed} session(s) have turns of several categories; each counts under its first turn's")
    return out


# ------------------------------------------------------------------ mix
def _copy_id(base: str, k: int, used: set[str]) -> str:
    j = 1
    while True:
        suffix = f"~{k}" if j == 1 else f"~{k}.{j}"
        cand = base[: MAX_LABEL_LEN - len(suffix)] + suffix
        if cand not in used:
            used.add(cand)
            return cand
        j += 1


def _arrival(row: TrafficRow) -> float:
    """The row's arrival_ms, read only where every row has one (``timed``)."""
    assert row.arrival_ms is not None
    return row.arrival_ms


def _quantile_times(starts: list[float], m: int) -> list[float]:
    """m times along the empirical quantile function of the start times:
    time i at rank i (n - 1) / (m - 1), linearly interpolated."""
    s = sorted(starts)
    if m == 1 or len(s) == 1:
        return [s[0]] * m
    out = []
    for i in range(m):
        x = i * (len(s) - 1) / (m - 1)
        lo = min(math.floor(x), len(s) - 2)
        out.append(s[lo] + (x - lo) * (s[lo + 1] - s[lo]))
    return out


def mix_rows(traffic: Traffic, mix: dict[str, float], n: int, seed: int = 0) -> Drawn:
    """Re-weight ``traffic`` to ``mix`` (checked with ``check_mix``; a category the
    traffic does not have raises MixError) with ``n`` rows."""
    mix = check_mix(mix)
    problem = unknown_categories(mix, traffic.categories)
    if problem:
        raise MixError(problem)
    rows = traffic.rows
    rng = random.Random(seed)
    units = units_of(rows)
    picks: list[tuple[Unit, int]] = []  # (unit, copy number; 0 = the original)
    short: list[str] = []
    for cat, target in sorted(_targets(n, mix).items()):
        pool, wanted, k = [u for u in units if u.category == cat], target, 0
        while wanted > 0:
            taken = _fill(pool, wanted, rng)
            if not taken:
                break
            picks += [(u, k) for u in taken]
            wanted -= sum(len(u) for u in taken)
            k += 1
        if wanted:
            short.append(f"{cat} {target - wanted} of {target}")
    rng.shuffle(picks)  # interleave the categories
    used = {r.prompt_id for r in rows}
    used_sessions = {r.session_id for r in rows if r.session_id is not None}
    timed = all(r.arrival_ms is not None for r in rows)
    starts = _quantile_times([_arrival(rows[u.rows[0]]) for u in units], len(picks)) if timed and picks else []
    out = Drawn([])
    for p, (unit, k) in enumerate(picks):
        first = rows[unit.rows[0]]
        session = _copy_id(first.session_id, k, used_sessions) if k and first.session_id is not None else None
        for i in unit.rows:
            r = rows[i]
            update: dict = {}
            if k:
                update["prompt_id"] = _copy_id(r.prompt_id, k, used)
                note = f"copy {k} of row {r.prompt_id!r} (specdec traffic mix, seed {seed})"
                update["content_note"] = f"{r.content_note}; {note}" if r.content_note else note
                if session is not None:
                    update["session_id"] = session
            if timed:
                update["arrival_ms"] = starts[p] + (_arrival(r) - _arrival(first))
            out.rows.append(TrafficRow.model_validate({**r.model_dump(), **update}) if update else r)
        out.copies += len(unit) if k else 0
    if timed:
        out.rows.sort(key=_arrival)
        out.notes.append(
            f"arrival_ms placed on the source's clock: {len(picks)} units on the quantiles of its "
            f"{len(units)} unit start times (the arrival-rate curve keeps its shape)"
        )
    elif any(r.arrival_ms is not None for r in rows):
        out.notes.append("arrival_ms kept as drawn (not every source row has one): a copy arrives with its original")
    if out.copies:
        out.notes.append(
            f"{out.copies} rows are copies (drawn with replacement): the same content as their "
            "original under a new prompt_id '<id>~<k>' (content_note says which); with "
            "--prefix-cache keep a copy may hit the prefix cache"
        )
    if short:
        out.notes.append("fewer rows than the mix asks for (sessions are kept whole): " + ", ".join(short))
    mixed = _mixed_sessions(rows, units)
    if mixed:
        out.notes.append(f"{mixed} session(s) have turns of several categories; each counts under its first turn's")
    return out


# ------------------------------------------------------------------ output
def write_rows(rows: list[TrafficRow], out: Path, source: Traffic) -> Traffic:
    """Write rows as ``.parquet`` or ``.jsonl`` (atomically); the file must not be the source."""
    out = Path(out)
    if out.resolve() == Path(source.path).resolve():
        raise SpecdecError(f"-o {out}: is the input file; write to another file")
    if not out.parent.is_dir():
        raise SpecdecError(f"-o {out}: no such folder {out.parent}")
    suffix = out.suffix.lower()
    result = Traffic(path=out, sha256="", rows=rows)
    if suffix == ".parquet":
        write_traffic_parquet(result, out)
    elif suffix in (".jsonl", ".ndjson"):
        atomic_write_text(out, "".join(r.model_dump_json(exclude_none=True) + "\n" for r in rows))
    else:
        raise SpecdecError(f"-o {out}: unknown format, expected a .parquet or .jsonl file name")
    return result
