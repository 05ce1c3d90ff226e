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

With ``blocks=True`` (Mooncake) the file is of format version 3
(``specdec.schemas.traffic_blocks``): a prompt given as ``utf8.Utf8Blocks``
is stored as its block ids (``prompt_blocks``) and its own tail
(``prompt_tail``), each distinct block's text once in the file's block table
(key-value metadata, written at the end). A Mooncake row's ~27k characters
then cost ~200 bytes in the file instead of ~1,300, and neither its text
column nor its compression is built: ~50 us of CPU a row less (BENCHMARKS).
Readers join the blocks back (``specdec.traffic.raw``): the same prompts.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdec.atomic import atomic_write_with
from specdec.schemas.arrow import arrow_schema, table_from_columns
from specdec.schemas.records import TRAFFIC_SCHEMA_VERSION, TrafficRow
from specdec.schemas.traffic_blocks import BLOCKS_KEY, TrafficStoredPrompt
from specdec.traffic.importers.utf8 import Utf8Blocks, bytes_string_array, string_array

#: Rows per batch (and row group), at most.
BATCH = 20_000
#: Characters (bytes, for ``Utf8Parts``) of prompt, messages and content_note text per batch, at most (a batch ends at
#: the row that passes it). A version-3 Mooncake row holds ~1.8k (its tail and note): ~9,000 rows a batch, ~30 MB.
BATCH_CHARS = 16_000_000
#: Text columns that may hold ``Utf8Parts``.
_PARTS = ("prompt", "messages")


def traffic_schema(blocks: bool) -> pa.Schema:
    """TrafficRow's Arrow schema; with ``blocks``, plus the stored-prompt columns of version 3."""
    schema = arrow_schema(TrafficRow)
    if not blocks:
        return schema
    return pa.schema(
        [*schema, *arrow_schema(TrafficStoredPrompt)],
        metadata={**schema.metadata, b"traffic_schema_version": TRAFFIC_SCHEMA_VERSION.encode()},
    )


def write_batches(values: Iterable[dict], out: Path, *, blocks: bool = False) -> int:
    """Write every row of ``values``; returns how many (0: nothing written).
    ``blocks``: store ``Utf8Blocks`` prompts as blocks (format version 3)."""
    names = list(TrafficRow.model_fields)
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        sink = _Sink(tmp, traffic_schema(blocks), {} if blocks else None)
        try:
            cols: dict[str, list] = {n: [] for n in names}
            rows = chars = 0
            for v in values:
                for n in names:
                    cols[n].append(v.get(n))
                count += 1
                rows += 1
                p = v.get("prompt")  # what the batch holds: a stored prompt's tail, not its blocks (shared)
                chars += (len(p.tail) if blocks and isinstance(p, Utf8Blocks) else len(p or "")) + len(
                    v.get("messages") or ""
                )
                chars += len(v.get("content_note") or "")
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

    def __init__(self, tmp: Path, schema: pa.Schema, blocks: dict | None):
        self.tmp, self.schema = tmp, schema
        self.blocks = blocks  # block id -> Block, filled as batches are written (None: version 2)
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
                    self.writer = _flush(self.writer, self.tmp, self.schema, cols, self.blocks)
                except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                    self.error = exc
        if self.writer is not None:
            try:
                if self.blocks is not None and self.error is None:
                    self.writer.add_key_value_metadata({BLOCKS_KEY: _block_table(self.blocks)})
                self.writer.close()
            except BaseException as exc:  # noqa: BLE001 - as above
                self.error = self.error or exc


def _flush(writer, tmp: Path, schema: pa.Schema, cols: dict[str, list], blocks: dict | None):
    stored = _stored(cols, blocks) if blocks is not None else []
    for name in _PARTS:
        cols[name] = string_array(cols[name])
    table = table_from_columns(TrafficRow, cols)
    for array in stored:
        table = table.append_column(schema.field(table.num_columns), array)
    if writer is None:
        writer = pq.ParquetWriter(
            tmp, schema, write_page_checksum=True, compression="zstd", dictionary_pagesize_limit=256 * 1024 * 1024
        )
    writer.write_table(table, row_group_size=len(table))
    return writer


def _stored(cols: dict[str, list], blocks: dict) -> list[pa.Array]:
    """Version 3: each ``Utf8Blocks`` prompt of the batch taken out of
    ``cols["prompt"]`` (left null) and returned as the columns
    ``prompt_blocks`` and ``prompt_tail``; its blocks added to ``blocks``."""
    prompts, ids, offsets, unlisted = cols["prompt"], [], [0], []
    tails: list[bytes | None] = []
    for i, p in enumerate(prompts):
        if isinstance(p, Utf8Blocks):
            got = [b.start for b in p.blocks]
            blocks.update(zip(got, p.blocks))
            ids += got
            tails.append(p.tail)
            unlisted.append(False)
            prompts[i] = None
        else:
            tails.append(None)
            unlisted.append(True)
        offsets.append(len(ids))
    mask = pa.array(unlisted) if any(unlisted) else None
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(ids, pa.int64()), mask=mask)
    return [lists, bytes_string_array(tails)]


def _block_table(blocks: dict) -> str:
    """The block table (``TrafficBlock`` objects as JSON text), by id."""
    return json.dumps(
        [{"block_id": k, "text": b.text, "tokens": b.tokens} for k, b in sorted(blocks.items())], ensure_ascii=False
    )
