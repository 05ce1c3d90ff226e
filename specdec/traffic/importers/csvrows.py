"""Reading trace CSV files: header by column name (order free), rows as
dicts with their 1-based row number (the header is row 1), strict numbers."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from pathlib import Path

from specdec.errors import InputFileError
from specdec.traffic.importers.common import Malformed

_INT = re.compile(r"[0-9]+")


def csv_rows(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, str] | Malformed]]:
    """Yield (row number, {column: text}) or (row number, Malformed) for a row
    whose number of fields differs from the header's. A missing required
    column refuses the file (row 1). Blank lines are skipped."""
    try:
        fh = path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise InputFileError(path, f"cannot be read ({exc.strerror})") from None
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise InputFileError(path, f"not a readable CSV header ({exc})", row=1) from None
        if header is None:
            raise InputFileError(path, "the file is empty (expected a CSV header)")
        header = [h.strip() for h in header]
        for name in required:
            if name not in header:
                raise InputFileError(path, f"missing column (the header has: {', '.join(header)})", row=1, field=name)
        wanted = [n for n in (*required, *optional) if n in header]
        index = {n: header.index(n) for n in wanted}
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except UnicodeDecodeError as exc:  # the reader cannot go on past it
                raise InputFileError(
                    path, f"not UTF-8 ({exc.reason}); save the file as UTF-8", row=reader.line_num + 1
                ) from None
            except csv.Error as exc:
                yield reader.line_num, Malformed(reader.line_num, None, f"not readable as CSV ({exc})")
                continue
            row = reader.line_num
            if not fields or not any(f.strip() for f in fields):
                continue
            if len(fields) != len(header):
                yield row, Malformed(row, None, f"expected {len(header)} fields as in the header, got {len(fields)}")
                continue
            yield row, {n: fields[i] for n, i in index.items()}


def whole_number(text: str) -> int:
    """A token count: ASCII digits only (no sign, no decimal point)."""
    text = text.strip()
    if not _INT.fullmatch(text):
        raise ValueError(f"expected a whole number of tokens >= 0, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        x = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"expected a finite number of seconds >= 0, got {text!r}")
    return x
