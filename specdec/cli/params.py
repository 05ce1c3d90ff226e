"""Click parameter types for every number and name a command line takes.

A bad value fails while click parses the options, before the command body
runs: nothing is prepared, started or created on disk, the exit code is 2 and
the message names the option (``Invalid value for '--max-tokens': ...``).

Numbers are read strictly: ASCII digits only (``int()`` would also take
``"1_000"``, ``" 7"`` or Arabic-Indic digits), floats must be finite (``nan``,
``inf`` and ``1e999`` are refused).

* ``PositiveInt`` (>= 1): ``--requests-per-level``, ``--repeats``.
* ``NonNegativeInt`` (>= 0): ``--warmup``.
* ``MaxTokens`` (1 .. 1,000,000): ``--max-tokens``.
* ``PositiveFloat`` (> 0, finite): ``--connect-timeout``, ``--request-timeout``.
* ``UnitInterval`` (0 .. 1): ``--max-error-rate``.
* ``LevelList``: ``--levels``, comma-separated whole numbers 1 .. 4096, in any
  order (runs go in ascending order); spaces around items are fine; an empty
  item (``1,,2``, ``1,2,``) or a level given twice is refused rather than
  silently dropped.
* ``RunName``: ``--run-id``, a plain folder name (see
  ``specdec.schemas.strict.check_run_name``).
"""

from __future__ import annotations

import math
import re

import click

from specdec.arms import ArmSpec, parse_arm
from specdec.schemas.strict import MAX_LEVEL, MAX_TOKENS_CEILING, check_run_name
from specdec.traffic.mix import MixError, parse_mix

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class StrictIntType(click.ParamType):
    """A whole number within [minimum, maximum]."""

    name = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None):
        self.minimum, self.maximum = minimum, maximum

    def to_int(self, value, param=None, ctx=None) -> int:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if isinstance(value, int):
            n = value
        else:
            text = str(value).strip()
            if not _INT.fullmatch(text):
                self.fail(f"{value!r} is not a whole number", param, ctx)
            n = int(text)
        if self.minimum is not None and n < self.minimum:
            self.fail(f"{n} is too small: must be at least {self.minimum}", param, ctx)
        if self.maximum is not None and n > self.maximum:
            self.fail(f"{n} is too large: must be at most {self.maximum:,}", param, ctx)
        return n

    def convert(self, value, param, ctx) -> int:
        return self.to_int(value, param, ctx)

    def __repr__(self) -> str:
        return f"StrictInt({self.minimum}, {self.maximum})"


class StrictFloatType(click.ParamType):
    """A finite number within a range; ``exclusive_min`` makes the lower bound open."""

    name = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, *, exclusive_min: bool = False):
        self.minimum, self.maximum, self.exclusive_min = minimum, maximum, exclusive_min

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number", param, ctx)
        if isinstance(value, (int, float)):
            x = float(value)
        else:
            text = str(value).strip()
            if not _FLOAT.fullmatch(text):
                self.fail(f"{value!r} is not a number", param, ctx)
            x = float(text)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.minimum is not None:
            if self.exclusive_min and x <= self.minimum:
                self.fail(f"{x:g} is too small: must be greater than {self.minimum:g}", param, ctx)
            if not self.exclusive_min and x < self.minimum:
                self.fail(f"{x:g} is too small: must be at least {self.minimum:g}", param, ctx)
        if self.maximum is not None and x > self.maximum:
            self.fail(f"{x:g} is too large: must be at most {self.maximum:g}", param, ctx)
        return x

    def __repr__(self) -> str:
        return f"StrictFloat({self.minimum}, {self.maximum})"


class LevelListType(click.ParamType):
    """Comma-separated concurrency levels -> list[int] (order kept, see module doc)."""

    name = "levels"
    _item = StrictIntType(1, MAX_LEVEL)

    def convert(self, value, param, ctx) -> list[int]:
        items = list(value) if isinstance(value, (list, tuple)) else str(value).split(",")
        if not items or items == [""]:
            self.fail("expected comma-separated integers such as 1,2,4,8, got nothing", param, ctx)
        levels: list[int] = []
        for pos, item in enumerate(items, start=1):
            if isinstance(item, str):
                item = item.strip()
                if not item:
                    self.fail(
                        f"item {pos} of {value!r} is empty; expected comma-separated integers such as 1,2,4,8",
                        param,
                        ctx,
                    )
                if not _INT.fullmatch(item):
                    self.fail(
                        f"{item!r} is not a whole number; expected comma-separated integers such as 1,2,4,8", param, ctx
                    )
            try:
                level = self._item.to_int(item)
            except click.BadParameter as exc:
                self.fail(f"level {exc.message}", param, ctx)
            if level in levels:
                self.fail(f"level {level} is given twice", param, ctx)
            levels.append(level)
        return levels


class RunNameType(click.ParamType):
    """A plain run-folder name (letters, digits, '.', '_', '-'; see check_run_name)."""

    name = "name"

    def convert(self, value, param, ctx) -> str:
        try:
            return check_run_name(value)
        except ValueError as exc:
            self.fail(f"{value!r} is not a plain run name: {exc}", param, ctx)


class ArmParam(click.ParamType):
    """A named arm, NAME=ENGINE[:SPEC][@REF] (specdec.arms.parse_arm)."""

    name = "arm"

    def convert(self, value, param, ctx):
        if isinstance(value, ArmSpec):
            return value
        try:
            return parse_arm(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


PositiveInt = StrictIntType(minimum=1)
NonNegativeInt = StrictIntType(minimum=0)
MaxTokens = StrictIntType(minimum=1, maximum=MAX_TOKENS_CEILING)
PositiveFloat = StrictFloatType(minimum=0.0, exclusive_min=True)
UnitInterval = StrictFloatType(minimum=0.0, maximum=1.0)
LevelList = LevelListType()
RunName = RunNameType()

__all__ = [
    "LevelList",
    "LevelListType",
    "MaxTokens",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "RunName",
    "RunNameType",
    "StrictFloatType",
    "StrictIntType",
    "UnitInterval",
]


class FloatList(click.ParamType):
    """Comma-separated positive finite numbers -> list[float]; an empty item or
    a value given twice is refused rather than dropped."""

    name = "numbers"

    def convert(self, value, param, ctx) -> list[float]:
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if any(not p for p in parts):
            self.fail(f"{value!r} has an empty item; expected comma-separated numbers such as 1,0.5", param, ctx)
        item = StrictFloatType(0.0, exclusive_min=True)
        out = [item.convert(p, param, ctx) for p in parts]
        if len(set(out)) != len(out):
            self.fail(f"{value!r} gives a value twice", param, ctx)
        return out


class MixParam(click.ParamType):
    """``category=share,...``, shares from 0 to 1 summing to 1 (see traffic_mix.check_mix)."""

    name = "mix"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        try:
            return parse_mix(value)
        except MixError as exc:
            self.fail(str(exc), param, ctx)
