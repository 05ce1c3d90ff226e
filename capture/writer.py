"""Column buffers for round traces, flushed to Parquet part files in the background.

The engine hook appends plain Python values to lists under a lock (no model
object per row). A daemon thread turns the buffers into an Arrow table every
``flush_s`` seconds and writes ``rounds-<pid>-<seq>.parquet`` atomically, so a
killed engine loses at most the last interval. A failed write (full disk) keeps
the rows in memory and retries at the next flush; nothing is dropped.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import os
import threading
from pathlib import Path

from specdec.schemas.arrow import table_from_columns, write_parquet_atomic
from specdec.schemas.records import RoundTrace

log = logging.getLogger("specdec.capture")

FIELDS: tuple[str, ...] = tuple(RoundTrace.model_fields)


class RoundWriter:
    def __init__(self, out_dir: Path, flush_s: float = 1.0, start_thread: bool = True):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_s
        self._lock = threading.Lock()
        self._cols: dict[str, list] = {f: [] for f in FIELDS}
        self._seq = 0
        self._stop = threading.Event()
        self.rows_written = 0
        self.write_errors = 0
        self._thread: threading.Thread | None = None
        if start_thread:
            self._thread = threading.Thread(target=self._loop, name="specdec-capture-flush", daemon=True)
            self._thread.start()
        atexit.register(self.close)
        # forked multiprocessing children leave through os._exit, which skips
        # atexit; multiprocessing runs its own finalizers there instead
        multiprocessing.util.Finalize(self, RoundWriter.close, args=(self,), exitpriority=100)

    def append_rows(self, columns: dict[str, list]) -> None:
        """Append several rows given as equal-length column lists."""
        with self._lock:
            for name, values in columns.items():
                self._cols[name].extend(values)

    def pending(self) -> int:
        with self._lock:
            return len(self._cols[FIELDS[0]])

    def flush(self) -> int:
        """Write buffered rows to a new part file; return rows written."""
        with self._lock:
            n = len(self._cols[FIELDS[0]])
            if n == 0:
                return 0
            cols, self._cols = self._cols, {f: [] for f in FIELDS}
            seq = self._seq
            self._seq += 1
        path = self.out_dir / f"rounds-{os.getpid()}-{seq:06d}.parquet"
        try:
            write_parquet_atomic(table_from_columns(RoundTrace, cols), path)
        except Exception as exc:  # full disk, permissions: keep rows, retry later
            self.write_errors += 1
            if self.write_errors == 1:
                log.error("specdec-capture: could not write %s (%s); keeping rows in memory and retrying", path, exc)
            with self._lock:
                for name in FIELDS:
                    cols[name].extend(self._cols[name])
                self._cols = cols
            return 0
        self.rows_written += n
        return n

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()
