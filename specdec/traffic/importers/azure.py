"""Azure LLM inference trace (2023 Splitwise, 2024 DynamoLLM): CSV with
``TIMESTAMP,ContextTokens,GeneratedTokens``.

Units: ``TIMESTAMP`` is a wall-clock datetime string with up to 7 fractional
digits (100 ns), e.g. ``2023-11-16 18:17:03.9799600`` (the dataset's README in
AzurePublicDataset and ../shared/data/azure-llm-2023/README.md). It carries no
time zone; it is read as UTC, which does not matter since only differences
are used. It is converted to ms since midnight of the first row's date, then
made relative (see ``common``). ``ContextTokens`` is the input length, ``GeneratedTokens``
the output length, both in tokens. There are no sessions or prefixes.

Category: the 2023 release comes as a code file and a conversation file; a
file name containing ``code`` gives rows the label ``code``, one containing
``conv`` the label ``chat`` (used when neither --category nor --mix is given).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

from specdec.traffic.importers.common import Malformed, TraceRow
from specdec.traffic.importers.csvrows import csv_rows, whole_number

SOURCE = "azure-llm-2023"
UNITS = "TIMESTAMP: datetime strings, 7 fractional digits, read as UTC and converted to ms"
#: The columns checked for range (``common.out_of_range``): time, input length, output length.
FIELDS = {"time": "TIMESTAMP", "input": "ContextTokens", "output": "GeneratedTokens"}
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def label_of(path: Path) -> str | None:
    name = path.name.lower()
    return "code" if "code" in name else "chat" if "conv" in name else None


def stamp(text: str) -> tuple[int, float]:
    """``2023-11-16 18:17:03.9799600`` -> (the date's ordinal, ms since that
    midnight); ValueError when it is not such a datetime. Kept apart so that
    ms stay exact to the 7th fractional digit (ms since 1970 as a float would
    round to ~0.2 microseconds)."""
    m = _STAMP.fullmatch(text.strip())
    if not m:
        raise ValueError(f"expected a datetime like 2023-11-16 18:17:03.9799600, got {text!r}")
    y, mo, d, h, mi, s, frac = m.groups()
    if int(h) > 23 or int(mi) > 59 or int(s) > 59:
        raise ValueError(f"time of day out of range in {text!r}")
    day = dt.date(int(y), int(mo), int(d)).toordinal()
    whole_s = int(h) * 3600 + int(mi) * 60 + int(s)
    return day, whole_s * 1000.0 + (int(frac) / 10 ** len(frac) * 1000.0 if frac else 0.0)


def parse(path: Path) -> Iterator[TraceRow | Malformed]:
    label = label_of(path)
    origin = None
    for row, rec in csv_rows(path, COLUMNS):
        if isinstance(rec, Malformed):
            yield rec
            continue
        try:
            day, ms = stamp(rec["TIMESTAMP"])
        except ValueError as exc:
            yield Malformed(row, "TIMESTAMP", str(exc))
            continue
        if origin is None:
            origin = day  # the clock's zero: midnight of the first row's date
        t = (day - origin) * 86_400_000.0 + ms
        try:
            n_in = whole_number(rec["ContextTokens"])
        except ValueError as exc:
            yield Malformed(row, "ContextTokens", str(exc))
            continue
        try:
            n_out = whole_number(rec["GeneratedTokens"])
        except ValueError as exc:
            yield Malformed(row, "GeneratedTokens", str(exc))
            continue
        yield TraceRow(row, t, n_in, n_out, label=label)
