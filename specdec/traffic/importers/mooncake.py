"""Mooncake (FAST'25) traces: JSON Lines of
``{"timestamp", "input_length", "output_length", "hash_ids"}``.

Units: ``timestamp`` is in milliseconds, relative to the trace start (Mooncake's
trace description, repeated in trace-formats.md and in the Dynamo and AIPerf
loaders; the published conversation trace spans about an hour with values up to
~3.6e6). An integer or a finite number >= 0. ``input_length`` and
``output_length`` are token counts. ``hash_ids`` lists the ids of the
request's 512-token prefix blocks, in order; requests sharing leading ids share
that prefix (kept: see ``content``). Other keys are ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from specdec.errors import InputFileError
from specdec.traffic.importers.common import Malformed, TraceRow

SOURCE = "mooncake"
#: Rows' prompts are written as their prefix blocks + a tail (traffic format version 3: ``writer``).
BLOCKS = True
UNITS = "timestamp: ms relative to the trace start"
#: The columns checked for range (``common.out_of_range``): time, input length, output length.
FIELDS = {"time": "timestamp", "input": "input_length", "output": "output_length"}


_INT = {int}


def _count(obj: dict, name: str) -> int:
    value = obj.get(name)
    if name not in obj:
        raise ValueError("missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number of tokens >= 0, got {json.dumps(value)}")
    return value


def _row(obj: object, row: int) -> TraceRow | Malformed:
    if not isinstance(obj, dict):
        return Malformed(row, None, "each line must be a JSON object")
    t = obj.get("timestamp")
    if "timestamp" not in obj:
        return Malformed(row, "timestamp", "missing")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        return Malformed(row, "timestamp", f"expected a number of ms >= 0, got {json.dumps(t)}")
    counts = {}
    for name in ("input_length", "output_length"):
        try:
            counts[name] = _count(obj, name)
        except ValueError as exc:
            return Malformed(row, name, str(exc))
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not set(map(type, ids)) <= _INT:  # bool is not int here
        return Malformed(row, "hash_ids", "expected a list of whole numbers (prefix block ids)")
    return TraceRow(row, float(t), counts["input_length"], counts["output_length"], hash_ids=tuple(ids))


def parse(path: Path) -> Iterator[TraceRow | Malformed]:
    try:
        fh = path.open(encoding="utf-8-sig")
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror})") from None
    with fh:
        row = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError as exc:
                raise InputFileError(path, f"not UTF-8 ({exc.reason}); save the file as UTF-8", row=row + 1) from None
            if not line:
                return
            row += 1
            if not line.strip():
                continue
            try:
                if line.startswith("\ufeff"):  # as json.loads says it
                    raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", line, 0)
                obj = _DECODER.decode(line)
            except (ValueError, RecursionError) as exc:
                msg = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)[:120]
                yield Malformed(row, None, f"invalid JSON ({msg})")
                continue
            yield _row(obj, row)


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


#: One decoder for every line: ``json.loads(line, parse_constant=...)`` builds
#: a decoder and its scanner per call (~4 us of a ~11 us line on this host).
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
