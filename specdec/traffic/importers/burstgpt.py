"""BurstGPT: CSV with ``Timestamp, Model, Request tokens, Response tokens,
Total tokens, Log Type`` and, in newer releases, ``Session ID`` and
``Elapsed time`` (columns are found by name, in any order).

Units: ``Timestamp`` is in seconds, relative to the trace start (the BurstGPT
README: "Request timestamp in seconds"; trace-formats.md), a number >= 0.
``Request tokens`` and ``Response tokens`` are token counts; a failed request
has 0 response tokens (kept, its ``max_tokens`` clamped to 1 and counted; use
the release ``BurstGPT_without_fails`` to leave them out). ``Session ID``, when
present and not empty, makes the rows of one conversation a session, turns in
arrival order. ``Model`` (e.g. ChatGPT, GPT-4) is kept as the row's ``model``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from specdec.traffic.importers.common import Malformed, TraceRow
from specdec.traffic.importers.csvrows import csv_rows, seconds, whole_number

SOURCE = "burstgpt"
UNITS = "Timestamp: seconds relative to the trace start, converted to ms"
#: The columns checked for range (``common.out_of_range``): time, input length, output length.
FIELDS = {"time": "Timestamp", "input": "Request tokens", "output": "Response tokens"}
COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
OPTIONAL = ("Model", "Session ID", "SessionID", "Log Type")


def parse(path: Path) -> Iterator[TraceRow | Malformed]:
    for row, rec in csv_rows(path, COLUMNS, OPTIONAL):
        if isinstance(rec, Malformed):
            yield rec
            continue
        try:
            t = seconds(rec["Timestamp"]) * 1000.0
        except ValueError as exc:
            yield Malformed(row, "Timestamp", str(exc))
            continue
        counts = []
        for name in ("Request tokens", "Response tokens"):
            try:
                counts.append(whole_number(rec[name]))
            except ValueError as exc:
                yield Malformed(row, name, str(exc))
                break
        if len(counts) < 2:
            continue
        session = (rec.get("Session ID") or rec.get("SessionID") or "").strip() or None
        model = (rec.get("Model") or "").strip() or None
        yield TraceRow(row, t, counts[0], counts[1], session=session, model=model)
