"""``specdec-capture proxy-export DIR -o traffic.parquet``: merge a proxy's
date-partitioned part files into one traffic file that ``specdec-replay``
reads.

Each proxy process counts ``arrival_ms`` from its own start; its part files
carry that start on the wall clock (``recording_start_wall_ns``). The export
puts every process on the clock of the earliest one (adds the difference of
the starts), orders the rows by arrival, validates every row against
``TrafficRow`` (a problem names the part file and row) and writes the result
atomically. ``--since``/``--until`` keep only some date partitions.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specdec.errors import InputFileError
from specdec.runfolder import TRAFFIC_PART_GLOB, traffic_part_date
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import TrafficRow


def part_files(out_dir: Path, since: str | None = None, until: str | None = None) -> list[Path]:
    files = []
    for path in sorted(Path(out_dir).glob(TRAFFIC_PART_GLOB)):
        date = traffic_part_date(path)
        if (since is None or date >= since) and (until is None or date <= until):
            files.append(path)
    return files


def export_traffic(out_dir: Path, out: Path, since: str | None = None, until: str | None = None) -> dict:
    """Write the merged traffic file; return a summary (files, rows, processes, categories)."""
    import pyarrow.parquet as pq  # heavy: pyarrow, imported only when used

    files = part_files(out_dir, since, until)
    if not files:
        raise InputFileError(out_dir, f"no proxy part files ({TRAFFIC_PART_GLOB})")
    loaded: list[tuple[int, TrafficRow]] = []
    for path in files:
        try:
            table = pq.read_table(path)
            meta = table.schema.metadata or {}
            start = int(meta[b"recording_start_wall_ns"])
        except (KeyError, ValueError) as exc:
            raise InputFileError(path, f"not a proxy part file (no recording_start_wall_ns: {exc})") from None
        except Exception as exc:
            raise InputFileError(path, f"not a readable Parquet file ({exc})") from None
        for i, rec in enumerate(table.to_pylist(), start=1):
            try:
                loaded.append((start, TrafficRow.model_validate(rec)))
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or None
                raise InputFileError(path, err["msg"], row=i, field=field) from None
    origin = min(start for start, _ in loaded)
    rows = []
    for start, row in loaded:
        if row.arrival_ms is not None:
            row = row.model_copy(update={"arrival_ms": row.arrival_ms + (start - origin) / 1e6})
        rows.append(row)
    rows.sort(key=lambda r: (r.arrival_ms is None, r.arrival_ms or 0.0, r.prompt_id))
    seen: set[str] = set()
    for row in rows:
        if row.prompt_id in seen:
            raise InputFileError(
                out_dir, f"prompt_id {row.prompt_id!r} appears in more than one row", field="prompt_id"
            )
        seen.add(row.prompt_id)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(table_from_records(TrafficRow, rows), out)
    categories: dict[str, int] = {}
    for row in rows:
        categories[row.category] = categories.get(row.category, 0) + 1
    return {
        "files": len(files),
        "rows": len(rows),
        "processes": len({s for s, _ in loaded}),
        "categories": dict(sorted(categories.items())),
        "out": str(out),
    }
