"""Take a run's captured rounds from an external server's capture folder.

Against servers specdec did not start (``--baseline-url/--speculative-url``),
the capture plugin writes wherever its server's ``SPECDEC_CAPTURE_DIR`` (or
``specdec-capture serve --dir``) points. ``--capture-dir`` names that folder:
after the replay, rows whose engine request id carries this run's request-id
prefix are copied into the run folder's capture parts (their ``run_id`` set to
this run), so the marts see them exactly as for the embedded engine. Rows of
other traffic in the same folder are left alone.

The plugin flushes every second and whenever its engine goes idle, so the
import polls until the row count has been stable for one flush interval or
``capture_wait_s`` has passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specdec.runfolder import ROUND_PART_GLOB, capture_dir, round_part_name
from specdec.schemas.arrow import arrow_schema, write_batches_atomic
from specdec.schemas.records import READ_SCHEMA_VERSIONS, RoundTrace

log = logging.getLogger("specdec.replay")


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob(ROUND_PART_GLOB)) + sorted(folder.glob("rounds.parquet"))


def _readable(f: Path) -> str | None:
    """Why part file ``f`` cannot be taken (a schema version the analytics do not read), or None."""
    meta = pq.read_schema(f)
    version = (meta.metadata or {}).get(b"schema_version", b"").decode()
    return None if version in READ_SCHEMA_VERSIONS else f"{f.name} (schema_version {version or 'missing'})"


class _Counts:
    """This run's rows per part file of a capture folder, counted from the engine request ids
    alone; a file whose size and modification time are unchanged since the last poll is not read
    again (the plugin writes each part once, atomically, so a folder of a day's traffic is read
    once, not at every poll)."""

    def __init__(self, folder: Path, prefix: str):
        self.folder, self.prefix = folder, prefix
        self.seen: dict[Path, tuple[tuple[int, int], int, str | None]] = {}

    def poll(self) -> tuple[int, list[str]]:
        """(rows of this run, files skipped with why) over the folder now."""
        rows, skipped = 0, []
        now: dict[Path, tuple[tuple[int, int], int, str | None]] = {}
        for f in _files(self.folder):
            try:
                st = f.stat()
                stamp = (st.st_size, st.st_mtime_ns)
                if f in self.seen and self.seen[f][0] == stamp:
                    now[f] = self.seen[f]
                else:
                    why = _readable(f)
                    n = 0
                    if why is None:  # one row group's ids at a time
                        part = pq.ParquetFile(f)
                        for i in range(part.metadata.num_row_groups):
                            ids = part.read_row_group(i, columns=["engine_request_id"]).column(0)
                            n += int(pc.sum(pc.match_substring(ids, self.prefix)).as_py() or 0)
                    now[f] = (stamp, n, why)
            except Exception as exc:  # a corrupt or foreign file: name it, keep going
                now[f] = ((-1, -1), 0, f"{f.name} ({type(exc).__name__})")
            _, n, why = now[f]
            rows += n
            if why:
                skipped.append(why)
        self.seen = now
        return rows, skipped


def _copy(folder: Path, prefix: str, run_id: str, target: Path) -> tuple[int, list[str]]:
    """Write this run's rows of every readable part file into ``target`` (one file, written
    atomically by ``write_batches_atomic``), ``run_id`` set to this run; read one row group at a
    time, so memory holds a row group or two, not the run. Return (rows written, files skipped
    with why; a file that failed after some of its row groups were taken says how many rows were)."""
    schema = arrow_schema(RoundTrace)
    skipped: list[str] = []

    def taken() -> Iterator[pa.Table]:
        for f in _files(folder):
            rows = 0
            try:
                why = _readable(f)
                if why is not None:
                    skipped.append(why)
                    continue
                part = pq.ParquetFile(f)
                for i in range(part.metadata.num_row_groups):
                    t = part.read_row_group(i, columns=schema.names).cast(schema)
                    t = t.filter(pc.match_substring(t.column("engine_request_id"), prefix))
                    if t.num_rows:
                        rows += t.num_rows
                        yield t.set_column(
                            schema.get_field_index("run_id"),
                            schema.field("run_id"),
                            pa.array([run_id] * t.num_rows, pa.string()),
                        )
            except Exception as exc:  # a corrupt or foreign file: name it, keep going
                partly = f", {rows} rows taken before the error" if rows else ""
                skipped.append(f"{f.name} ({type(exc).__name__}{partly})")

    rows = write_batches_atomic(taken(), schema, target)
    if not rows:
        target.unlink(missing_ok=True)
    return rows, skipped


def import_capture(source: Path, run_dir: Path, run_id: str, prefix: str, wait_s: float, flush_s: float = 1.0) -> dict:
    """Copy this run's rows from ``source`` into the run folder; return the
    manifest's ``capture`` entry (source, path, rows, skipped files)."""
    source = Path(source)
    deadline = time.monotonic() + wait_s
    counts = _Counts(source, prefix)
    rows, skipped = counts.poll()
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(min(flush_s / 2, max(deadline - time.monotonic(), 0)))
        again, skipped = counts.poll()
        if again != rows:
            rows, stable_since = again, time.monotonic()
        elif time.monotonic() - stable_since >= flush_s and rows:
            break
    out = capture_dir(run_dir)
    if rows:
        out.mkdir(parents=True, exist_ok=True)
        rows, skipped = _copy(source, prefix, run_id, out / round_part_name("import", 0))
    entry = {"source": "directory", "path": str(source.resolve()), "rows": rows}
    if skipped:
        entry["skipped_files"] = skipped
        log.warning("capture import: skipped %d unreadable file(s) in %s: %s", len(skipped), source, skipped[:5])
    if rows == 0:
        entry["note"] = (
            f"no rows with request ids {prefix}* were found in {source}: is that the folder "
            "the servers' capture plugin writes to (SPECDEC_CAPTURE_DIR / specdec-capture serve --dir)?"
        )
    return entry
