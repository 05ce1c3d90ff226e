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
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from specdec.runfolder import ROUND_PART_GLOB, capture_dir, round_part_name
from specdec.schemas.arrow import arrow_schema, write_parquet_atomic
from specdec.schemas.records import SCHEMA_VERSION, RoundTrace

log = logging.getLogger("specdec.replay")


def _matching_rows(folder: Path, prefix: str) -> tuple[pa.Table, list[str]]:
    """Rows of every readable part file whose engine_request_id contains prefix."""
    schema = arrow_schema(RoundTrace)
    tables, skipped = [], []
    for f in sorted(folder.glob(ROUND_PART_GLOB)) + sorted(folder.glob("rounds.parquet")):
        try:
            meta = pq.read_schema(f)
            version = (meta.metadata or {}).get(b"schema_version", b"").decode()
            if version != SCHEMA_VERSION:
                skipped.append(f"{f.name} (schema_version {version or 'missing'})")
                continue
            t = pq.read_table(f, columns=schema.names).cast(schema)
        except Exception as exc:  # a corrupt or foreign file: name it, keep going
            skipped.append(f"{f.name} ({type(exc).__name__})")
            continue
        mask = pc.match_substring(t.column("engine_request_id"), prefix)
        t = t.filter(mask)
        if t.num_rows:
            tables.append(t)
    if not tables:
        return schema.empty_table(), skipped
    return pa.concat_tables(tables), skipped


def import_capture(source: Path, run_dir: Path, run_id: str, prefix: str, wait_s: float, flush_s: float = 1.0) -> dict:
    """Copy this run's rows from ``source`` into the run folder; return the
    manifest's ``capture`` entry (source, path, rows, skipped files)."""
    source = Path(source)
    deadline = time.monotonic() + wait_s
    table, skipped = _matching_rows(source, prefix)
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(min(flush_s / 2, max(deadline - time.monotonic(), 0)))
        again, skipped = _matching_rows(source, prefix)
        if again.num_rows != table.num_rows:
            table, stable_since = again, time.monotonic()
        elif time.monotonic() - stable_since >= flush_s and table.num_rows:
            break
    entry = {"source": "directory", "path": str(source.resolve()), "rows": table.num_rows}
    if skipped:
        entry["skipped_files"] = skipped
        log.warning("capture import: skipped %d unreadable file(s) in %s: %s", len(skipped), source, skipped[:5])
    if table.num_rows == 0:
        entry["note"] = (
            f"no rows with request ids {prefix}* were found in {source}: is that the folder "
            "the servers' capture plugin writes to (SPECDEC_CAPTURE_DIR / specdec-capture serve --dir)?"
        )
        return entry
    table = table.set_column(
        table.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * table.num_rows, pa.string())
    )
    out = capture_dir(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(
        table.replace_schema_metadata(arrow_schema(RoundTrace).metadata), out / round_part_name("import", 0)
    )
    return entry
