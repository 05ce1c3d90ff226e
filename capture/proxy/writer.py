"""The proxy's recorder: a thread that turns finished exchanges into traffic
rows and writes them to Parquet, partitioned by date, every ``flush_s``.

The proxy's event loop only calls ``submit`` (a queue put); parsing, row
validation and file writes happen here, so recording never delays a response.
Nothing here raises into the proxy: every failure is counted (``stats``) and
logged once per kind. A failed write keeps the rows and retries at the next
flush, up to ``max_pending_rows``; beyond that the oldest rows are dropped and
counted. ``close`` writes what is left (the CLI calls it on SIGINT/SIGTERM).

Layout under the output folder (UTC date of the request's arrival), defined
in ``specdec.runfolder`` (``traffic_part``)::

    date=YYYY-MM-DD/part-<process_token>-<seq>.parquet

Each part file's key-value metadata carries ``traffic_schema_version``,
``process_token`` and ``recording_start_wall_ns`` (the wall clock at the
proxy's ``arrival_ms`` = 0), which ``proxy_export`` uses to put the
recordings of several proxy processes on one clock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from specdec.capture.proxy.record import Exchange, NotRecorded, RowMaker
from specdec.runfolder import partition_date, process_token, traffic_part
from specdec.schemas.arrow import table_from_columns, write_parquet_atomic
from specdec.schemas.records import TRAFFIC_SCHEMA_VERSION, TrafficRow

log = logging.getLogger("specdec.capture.proxy.service")

DEFAULT_FLUSH_S = 2.0
DEFAULT_MAX_PENDING_ROWS = 100_000


def _default_write(table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(table, path)


class Recorder:
    def __init__(
        self,
        out_dir: Path,
        maker: RowMaker,
        flush_s: float = DEFAULT_FLUSH_S,
        *,
        write: Callable = _default_write,
        max_pending_rows: int = DEFAULT_MAX_PENDING_ROWS,
    ):
        self.out_dir, self.maker, self.flush_s, self.write = Path(out_dir), maker, flush_s, write
        self.max_pending_rows = max_pending_rows
        self.token = process_token()
        self.start_mono_ns = time.monotonic_ns()
        self.start_wall_ns = time.time_ns()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: list[tuple[str, dict]] = []  # (date, row)
        self._seq = 0
        self._ids = 0
        self._lock = threading.Lock()
        self.counts: Counter = Counter()
        self.not_recorded: Counter = Counter()
        self.failures: Counter = Counter()
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specdec-proxy-recorder", daemon=True)

    # ------------------------------------------------ called on the event loop
    def start(self) -> Recorder:
        self._thread.start()
        return self

    def new_prompt_id(self) -> str:
        self._ids += 1
        return f"px-{self.token}-{self._ids:08d}"

    def arrival_ms(self) -> float:
        return (time.monotonic_ns() - self.start_mono_ns) / 1e6

    def submit(self, ex: Exchange) -> None:
        self._queue.put(ex)

    def stats(self) -> dict:
        with self._lock:
            return {
                "process_token": self.token,
                "out_dir": str(self.out_dir),
                **{
                    k: self.counts[k]
                    for k in ("exchanges", "rows_recorded", "rows_written", "files_written", "flushes", "rows_dropped")
                },
                "rows_pending": len(self._pending) + self._queue.qsize(),
                "not_recorded": dict(self.not_recorded),
                "failures": dict(self.failures),
                "failures_total": sum(self.failures.values()),
                "last_error": self.last_error,
            }

    def close(self, timeout_s: float = 30.0) -> None:
        """Process everything submitted, write it, stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)
        else:  # never started (tests): do the work here
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item:
                    self._take(item)
            self.flush()

    # ------------------------------------------------ the recorder thread
    def _fail(self, kind: str, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        with self._lock:
            first = kind not in self.failures
            self.failures[kind] += 1
            self.last_error = f"{kind}: {text}"[:500]
        if first:
            log.warning(
                "specdec proxy: recording failure (%s): %s; counted at /specdec/stats, "
                "the client's request is not affected",
                kind,
                text,
            )

    def _take(self, ex: Exchange) -> None:
        with self._lock:
            self.counts["exchanges"] += 1
        try:
            row = self.maker.row(ex)
        except NotRecorded as exc:
            if exc.reason.startswith("invalid_"):
                self._fail("bad_row", exc.reason)
            else:
                with self._lock:
                    self.not_recorded[exc.reason] += 1
            return
        except Exception as exc:  # a parse error, anything: counted, never raised
            self._fail("bad_exchange", exc)
            return
        date = partition_date(ex.wall_ns)
        with self._lock:
            self._pending.append((date, row))
            self.counts["rows_recorded"] += 1

    def _run(self) -> None:
        next_flush = time.monotonic() + self.flush_s
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, next_flush - time.monotonic()))
            except queue.Empty:
                item = False
            if item:
                self._take(item)
            if item is None or time.monotonic() >= next_flush:
                if item is None:  # closing: drain what was submitted before close
                    while not self._queue.empty():
                        rest = self._queue.get_nowait()
                        if rest:
                            self._take(rest)
                self.flush()
                next_flush = time.monotonic() + self.flush_s
                if item is None or (self._stop.is_set() and self._queue.empty()):
                    return

    def flush(self) -> None:
        """Write the pending rows, one file per date; keep them on failure."""
        with self._lock:
            pending, self._pending = self._pending, []
            self.counts["flushes"] += 1
        if not pending:
            return
        by_date: dict[str, list[dict]] = {}
        for date, row in pending:
            by_date.setdefault(date, []).append(row)
        kept: list[tuple[str, dict]] = []
        for date, rows in by_date.items():
            try:
                self._seq += 1
                self.write(self._table(rows), traffic_part(self.out_dir, date, self.token, self._seq))
                with self._lock:
                    self.counts["rows_written"] += len(rows)
                    self.counts["files_written"] += 1
            except Exception as exc:  # full disk, unwritable folder, anything
                self._fail("write", exc)
                kept.extend((date, r) for r in rows)
        if kept:
            with self._lock:
                self._pending = kept + self._pending
                over = len(self._pending) - self.max_pending_rows
                if over > 0:
                    del self._pending[:over]
                    self.counts["rows_dropped"] += over

    def _table(self, rows: list[dict]):
        columns = {name: [r[name] for r in rows] for name in TrafficRow.model_fields}
        table = table_from_columns(TrafficRow, columns)
        meta = dict(table.schema.metadata or {})
        meta.update(
            {
                b"traffic_schema_version": TRAFFIC_SCHEMA_VERSION.encode(),
                b"process_token": self.token.encode(),
                b"recording_start_wall_ns": str(self.start_wall_ns).encode(),
            }
        )
        return table.replace_schema_metadata(meta)
