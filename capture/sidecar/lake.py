"""The sidecar's Parquet lake: move the capture plugin's finished part files
into the hive layout, and write counter scrapes beside them.

Layout and names: ``specdec.runfolder`` (``lake_rounds_part``,
``lake_counters_part``). A part file ``rounds-<token>-<seq>.parquet`` becomes
one lake file per (UTC date of ``wall_time_ns``, ``run_id``) it holds, named
``part-<token>-<seq>.parquet`` in that partition, so a name never collides and
compacting the same part twice (a crash between the lake write and the
delete) rewrites the same file instead of duplicating rows.

Never lose a row: every lake file is written atomically (temp file, fsync,
rename), and the source part is deleted only after all its lake files are in
place. The plugin writes its parts atomically too, so a file matching
``rounds-*.parquet`` is finished; its temp files start with a dot and are
skipped. A part that cannot be read (or does not hold RoundTrace columns) is
left in place and counted once, with the rows its footer declares (0 when
even the footer is unreadable); it is tried again only if its size or
modification time changes. A lake write that fails (full disk) leaves the
source in place for the next pass.

Never launder damage. The lake copy is written with fresh page checksums, so
a part damaged on disk would look sound once compacted. Before a part is
rewritten, every page is checked: its CRC where the writer wrote one (the
capture writer always does: ``schemas.arrow.write_parquet_atomic``), then a
full decode of every column of every row group, and the row count against the
footer's. A part that fails is *damaged*: left in place, never deleted,
counted as unreadable and as damaged (``specdec_sidecar_damaged_files_total``,
alert ``SpecdecCapturePartDamaged``) and logged with the page's error.

Runs in a worker thread (blocking file I/O); results go back as plain data.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specdec.runfolder import (
    CAPTURE_STATUS_GLOB,
    ROUND_PART_GLOB,
    lake_counters_part,
    lake_rounds_part,
    partition_date,
    process_token,
    round_part_key,
)
from specdec.schemas.arrow import arrow_schema, table_from_records, write_parquet_atomic
from specdec.schemas.counters import CounterScrape
from specdec.schemas.records import RoundTrace

log = logging.getLogger("specdec.capture.sidecar.service")

NS_PER_DAY = 86_400 * 10**9


class DamagedPart(Exception):
    """A part whose footer reads but whose pages do not: a page checksum
    mismatch, an undecodable page, or fewer rows than the footer declares."""


#: Columns the sidecar's live metrics need from each compacted part.
METRIC_COLUMNS = (
    "engine_request_id",
    "process_token",
    "step_index",
    "tokens_proposed",
    "tokens_accepted",
    "draft_ms",
    "verify_ms",
    "wall_time_ns",
)


@dataclass
class CompactResult:
    """What one compaction pass did."""

    files: int = 0  # part files moved into the lake
    rows: int = 0  # rows written to the lake
    unreadable_files: int = 0  # newly found unreadable parts (each counted once)
    rows_dropped: int = 0  # rows those parts declare
    write_failures: int = 0  # parts left in place because a lake write or delete failed
    damaged_files: int = 0  # of the unreadable: footer sound, a page fails its checksum or does not decode
    tables: list[pa.Table] = field(default_factory=list)  # METRIC_COLUMNS of the rows moved
    errors: list[str] = field(default_factory=list)


def read_capture_status(capture_dir: Path) -> dict[str, int]:
    """The engine processes' capture counters (``capture.writer`` status files),
    summed: hook_failures, rows_dropped, write_errors, rows_written,
    rows_pending, plus ``processes`` (files read) and ``unreadable`` (files
    that are not a JSON object of counts; skipped, never fatal)."""
    out = {
        "hook_failures": 0,
        "rows_dropped": 0,
        "write_errors": 0,
        "rows_written": 0,
        "rows_pending": 0,
        "processes": 0,
        "unreadable": 0,
    }
    for path in sorted(Path(capture_dir).glob(CAPTURE_STATUS_GLOB)):
        try:
            status = json.loads(path.read_text())
            counts = {
                key: status.get(key, 0)
                for key in ("hook_failures", "rows_dropped", "write_errors", "rows_written", "rows_pending")
            }
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
                raise ValueError("a count is not a non-negative integer")
        except (OSError, ValueError, AttributeError):
            out["unreadable"] += 1
            continue
        for key, value in counts.items():
            out[key] += value
        out["processes"] += 1
    return out


class Compactor:
    """Moves finished part files from ``capture_dir`` into ``lake``."""

    def __init__(self, capture_dir: Path, lake: Path):
        self.capture_dir, self.lake = Path(capture_dir), Path(lake)
        self.schema = arrow_schema(RoundTrace)
        self._bad: dict[Path, tuple[int, int]] = {}  # unreadable part -> (size, mtime_ns) when found
        self.unreadable = 0  # unreadable parts left in place after the last pass (read from the event loop)

    def finished_parts(self) -> list[Path]:
        if not self.capture_dir.is_dir():
            return []
        return sorted(
            p
            for p in self.capture_dir.glob(ROUND_PART_GLOB)
            if not p.name.startswith(".") and round_part_key(p) is not None and p.is_file()
        )

    def compact_once(self) -> CompactResult:
        result = CompactResult()
        parts = self.finished_parts()
        for gone in set(self._bad) - set(parts):  # removed or renamed by someone else
            del self._bad[gone]
        for path in parts:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if self._bad.get(path) == (st.st_size, st.st_mtime_ns):
                continue  # known bad and unchanged: left in place, already counted
            try:
                table = self._read(path)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is data, not a crash
                self._bad[path] = (st.st_size, st.st_mtime_ns)
                result.unreadable_files += 1
                result.rows_dropped += _declared_rows(path)
                if isinstance(exc, DamagedPart):
                    result.damaged_files += 1
                    result.errors.append(f"{path}: damaged, not compacted ({exc}); left in place")
                else:
                    result.errors.append(f"{path}: cannot read ({type(exc).__name__}: {exc}); left in place")
                log.error("specdec-sidecar: %s", result.errors[-1])
                continue
            self._bad.pop(path, None)
            try:
                self._move(path, table)
            except Exception as exc:  # noqa: BLE001 - full disk, lost mount: retry next pass
                result.write_failures += 1
                result.errors.append(f"{path}: not moved ({type(exc).__name__}: {exc}); retried next pass")
                log.error("specdec-sidecar: %s", result.errors[-1])
                continue
            result.files += 1
            result.rows += table.num_rows
            result.tables.append(table.select(list(METRIC_COLUMNS)))
        self.unreadable = len(self._bad)
        return result

    def _read(self, path: Path) -> pa.Table:
        """The part's rows, every page checked (see the module docstring);
        DamagedPart when a page fails, another exception when the file is not
        a readable RoundTrace part at all."""
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        missing = [n for n in self.schema.names if n not in pf.schema_arrow.names]
        if missing:
            raise ValueError(f"not a RoundTrace part: missing column(s) {', '.join(missing)}")
        table = _read_every_page(pf)
        return table.select(self.schema.names).cast(self.schema)

    def _move(self, path: Path, table: pa.Table) -> None:
        key = round_part_key(path)
        assert key is not None  # finished_parts keeps only parts named by round_part_name
        token, seq = key
        for (day, run_id), part in split_by_day_and_run(table):
            out = lake_rounds_part(self.lake, partition_date(day * NS_PER_DAY), run_id, token, seq)
            out.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_atomic(part, out)
        path.unlink()  # only now: every row is in the lake


def split_by_day_and_run(table: pa.Table) -> list[tuple[tuple[int, str], pa.Table]]:
    """The table's rows grouped by (UTC day number of wall_time_ns, run_id), in that order."""
    if table.num_rows == 0:
        return []
    day = pc.divide(table["wall_time_ns"], pa.scalar(NS_PER_DAY, pa.int64()))  # >= 0: truncation = floor
    keyed = table.append_column("__day", day)
    keys = keyed.group_by(["__day", "run_id"]).aggregate([]).sort_by([("__day", "ascending"), ("run_id", "ascending")])
    out = []
    for d, r in zip(keys["__day"].to_pylist(), keys["run_id"].to_pylist()):
        mask = pc.and_(pc.equal(keyed["__day"], d), pc.equal(keyed["run_id"], r))
        out.append(((d, r), table.filter(mask)))
    return out


def _read_every_page(pf: pq.ParquetFile) -> pa.Table:
    """Every column of every row group, decoded (checksums verified as read)."""
    groups = []
    for i in range(pf.num_row_groups):
        try:
            group = pf.read_row_group(i)  # every column, so every page
            group.validate(full=True)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises OSError, ArrowInvalid, ... for a bad page
            raise DamagedPart(f"row group {i}: {' '.join(str(exc).split()) or type(exc).__name__}") from None
        declared = pf.metadata.row_group(i).num_rows
        if group.num_rows != declared:
            raise DamagedPart(f"row group {i}: {group.num_rows} rows decoded, the footer declares {declared}")
        groups.append(group)
    return pa.concat_tables(groups) if groups else pf.schema_arrow.empty_table()


def _declared_rows(path: Path) -> int:
    """Rows an unreadable part's footer declares; 0 when the footer is unreadable too."""
    try:
        return pq.read_metadata(path).num_rows
    except Exception:  # noqa: BLE001
        return 0


class CounterLake:
    """Buffers CounterScrape rows and writes them as date-partitioned part files.

    ``add``, ``take`` and ``put_back`` run on the event loop; ``write`` (one at
    a time) in a worker thread."""

    def __init__(self, lake: Path, max_rows: int = 100_000):
        self.lake = Path(lake)
        self.token = process_token()
        self.seq = 0
        self.max_rows = max_rows
        self.rows: list = []
        self.rows_written = self.rows_dropped = self.write_failures = 0

    def add(self, row) -> None:
        self.rows.append(row)
        self._bound()

    def take(self) -> list:
        rows, self.rows = self.rows, []
        return rows

    def put_back(self, rows: list) -> None:
        self.rows[:0] = rows
        self._bound()

    def _bound(self) -> None:
        if len(self.rows) > self.max_rows:  # the lake has refused writes for long: drop the oldest
            self.rows_dropped += len(self.rows) - self.max_rows
            del self.rows[: len(self.rows) - self.max_rows]

    def write(self, rows: list) -> list:
        """Write ``rows`` (one file per UTC date); return the rows not written (kept for a retry)."""
        by_date: dict[str, list] = {}
        for row in rows:
            by_date.setdefault(partition_date(row.wall_time_ns), []).append(row)
        left: list = []
        for date, group in sorted(by_date.items()):
            path = lake_counters_part(self.lake, date, self.token, self.seq)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_parquet_atomic(table_from_records(CounterScrape, group), path)
            except Exception as exc:  # noqa: BLE001 - keep the rows, retry at the next flush
                self.write_failures += 1
                log.error(
                    "specdec-sidecar: could not write %s (%s: %s); %d counter rows kept for the next flush",
                    path,
                    type(exc).__name__,
                    exc,
                    len(group),
                )
                left.extend(group)
                continue
            self.seq += 1
            self.rows_written += len(group)
        return left
