"""Stream traffic rows (``TrafficRow`` field dicts) to a Parquet file in
batches: column buffers, one Arrow table per ``BATCH`` rows, one row group
each, written to a temporary name and renamed when complete
(``specdec.atomic.atomic_write_with``), so memory holds one batch, not the file.

The composed content repeats (rows of one length bucket share it), so the
text columns are dictionary-encoded with a dictionary page large enough to
hold a batch's distinct texts: the file stays about as small as its distinct
content, not its row count times the prompt length. Rows that do not repeat
(Mooncake rows: their prefix blocks in ever new orders, ~27k characters a
row) still draw on the same small pool of material, which zstd finds across
the rows of a page: 20,000 such rows take 29 MB with zstd against 380 MB with
snappy (the default), written 3x faster. A batch also ends at ``BATCH_CHARS``
characters of text, so long rows do not make a batch's memory grow.

A prompt or messages given as ``utf8.Utf8Parts`` (Mooncake rows, session turns) goes into its column as
bytes (``utf8.string_array``), never as a Python ``str``. The Arrow table is
made and written (encoded, compressed: about 26 us a Mooncake row, with
the GIL released) in a thread of its own while the next batch is composed,
so on two cores the two overlap; at most one finished batch waits for it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdec.atomic import atomic_write_with
from specdec.replay.importers.utf8 import string_array
from specdec.schemas.arrow import arrow_schema, table_from_columns
from specdec.schemas.records import TrafficRow

#: Rows per batch (and row group), at most.
BATCH = 20_000
#: Characters (bytes, for ``Utf8Parts``) of prompt and messages text per batch, at most (a batch ends at the row that passes it).
BATCH_CHARS = 16_000_000
#: Text columns that may hold ``Utf8Parts``.
_PARTS = ("prompt", "messages")


def write_batches(values: Iterable[dict], out: Path) -> int:
    """Write every row of ``values``; returns how many (0: nothing written)."""
    names = list(TrafficRow.model_fields)
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        sink = _Sink(tmp, arrow_schema(TrafficRow))
        try:
            cols: dict[str, list] = {n: [] for n in names}
            rows = chars = 0
            for v in values:
                for n in names:
                    cols[n].append(v.get(n))
                count += 1
                rows += 1
                chars += len(v.get("prompt") or "") + len(v.get("messages") or "")
                if rows >= BATCH or chars >= BATCH_CHARS:
                    sink.put(cols)
                    cols = {n: [] for n in names}
                    rows = chars = 0
            if cols[names[0]]:
                sink.put(cols)
        finally:
            wrote = sink.close()  # waits for the thread, then raises what it raised
        if not wrote:
            raise _Empty

    try:
        atomic_write_with(out, write)
    except _Empty:
        return 0
    return count


class _Empty(Exception):
    """No row to write: no file is left behind."""


class _Sink:
    """Batches of column buffers made into Arrow tables and written by one thread."""

    def __init__(self, tmp: Path, schema: pa.Schema):
        self.tmp, self.schema = tmp, schema
        self.writer: pq.ParquetWriter | None = None
        self.error: BaseException | None = None
        self.batches: queue.Queue = queue.Queue(maxsize=1)
        self.thread = threading.Thread(target=self._run, name="traffic-writer", daemon=True)
        self.thread.start()

    def put(self, cols: dict[str, list]) -> None:
        if self.error is not None:
            raise self.error
        self.batches.put(cols)

    def close(self) -> bool:
        """End the thread (after the batches given); whether anything was written."""
        self.batches.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.writer is not None

    def _run(self) -> None:
        while (cols := self.batches.get()) is not None:
            if self.error is None:  # after a failure, batches are only taken (so put never blocks for ever)
                try:
                    self.writer = _flush(self.writer, self.tmp, self.schema, cols)
                except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                    self.error = exc
        if self.writer is not None:
            try:
                self.writer.close()
            except BaseException as exc:  # noqa: BLE001 - as above
                self.error = self.error or exc


def _flush(writer, tmp: Path, schema: pa.Schema, cols: dict[str, list]):
    for name in _PARTS:
        cols[name] = string_array(cols[name])
    table = table_from_columns(TrafficRow, cols)
    if writer is None:
        writer = pq.ParquetWriter(
            tmp, schema, write_page_checksum=True, compression="zstd", dictionary_pagesize_limit=256 * 1024 * 1024
        )
    writer.write_table(table, row_group_size=len(table))
    return writer
