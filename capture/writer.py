"""Column buffers for round traces, flushed to Parquet part files in the background.

The engine hook appends plain Python values to lists under a lock (no model
object per row). A daemon thread turns the buffers into an Arrow table every
``flush_s`` seconds and writes a part file atomically, named
``runfolder.round_part_name(process_token(), seq)``: the PID plus a random
token, so an engine restarted under a reused PID (common in containers) never
overwrites the parts of an earlier one. A killed engine loses at most the last
interval.

Bounded memory. While the disk cannot take the rows (full disk, lost mount)
they stay in memory and the thread retries, backing off (twice the interval
per failed attempt, at most ``MAX_RETRY_S``). Pending rows (buffered plus
being written) never exceed ``max_rows`` rows nor ``max_bytes`` estimated
bytes; rows past the bound are dropped, newest first, and counted in
``rows_dropped``. The log says once when writing starts failing, once when
rows start being dropped, and when writing works again, with the count
dropped meanwhile; rows still unwritten at close are logged as lost.

Status. After each flush (and at close) the thread rewrites, when anything
changed, ``status-<token>.json`` in the same folder
(``runfolder.capture_status_name``): rows written, dropped and pending, write
errors, and what ``status_extra`` adds (the plugin: its hook failures and run
id). These counts live inside the engine process; the file is how the
sidecar exports them. It is best effort: a failed status write is counted in
``status_errors`` and never touches the rows.

Byte estimate, cheap on purpose (no ``sys.getsizeof``): ``ROW_BYTES`` per row
(the 15 list slots plus the int and float objects a row adds) plus the length
of the row's strings (run_id, engine_request_id, phase). The strings are
mostly shared objects, so this overestimates memory, never underestimates it.

Fork safety. vLLM forks processes (the engine core, workers) from a process in
which plugins are already registered; a forked child has no flush thread, and
locks held by another thread at the fork stay held forever. An
``os.register_at_fork(after_in_child=...)`` hook therefore gives every writer
in the child new locks, empty buffers and counters, a new process token and
part sequence, and a new flush thread. The parent's pending rows stay the
parent's to write (never twice), and the child's rows reach disk within the
interval even if it dies later without running any exit hook.
"""

from __future__ import annotations

import atexit
import json
import logging
import multiprocessing.util
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from specdec.atomic import atomic_write_text
from specdec.capture.settings import DEFAULT_FLUSH_S, DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, flush_seconds
from specdec.runfolder import (
    ENV_CAPTURE_MAX_BYTES,
    ENV_CAPTURE_MAX_ROWS,
    capture_status_name,
    process_token,
    round_part_name,
)
from specdec.schemas.arrow import table_from_columns, write_parquet_atomic
from specdec.schemas.records import RoundTrace

log = logging.getLogger("specdec.capture")

FIELDS: tuple[str, ...] = tuple(RoundTrace.model_fields)
#: Estimated bytes a row costs in the buffers, beyond its strings.
ROW_BYTES = 200
_STR_FIELDS = ("run_id", "engine_request_id", "phase")
#: Longest wait between two write attempts while writing fails.
MAX_RETRY_S = 30.0

_WRITERS: weakref.WeakSet[RoundWriter] = weakref.WeakSet()


def _empty() -> dict[str, list]:
    return {f: [] for f in FIELDS}


def _row_bytes(columns: dict[str, list], i: int) -> int:
    return ROW_BYTES + sum(len(columns[f][i]) for f in _STR_FIELDS)


class RoundWriter:
    def __init__(
        self,
        out_dir: Path,
        flush_s: float = DEFAULT_FLUSH_S,
        start_thread: bool = True,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_rows < 1 or max_bytes < 1:
            raise ValueError(f"max_rows and max_bytes must be > 0 (got {max_rows}, {max_bytes})")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_seconds(flush_s, "flush_s")
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._clock = clock
        self._start_thread = start_thread
        #: More counters for the status file (the plugin adds its hook failures)
        self.status_extra: Callable[[], dict] | None = None
        self._closed = False
        self._new_process()
        _WRITERS.add(self)
        atexit.register(self.close)
        # forked multiprocessing children leave through os._exit, which skips
        # atexit; multiprocessing runs its own finalizers there instead, after
        # clearing the parent's: register again in each such child
        multiprocessing.util.Finalize(self, RoundWriter.close, args=(self,), exitpriority=100)
        multiprocessing.util.register_after_fork(self, RoundWriter._finalize_in_mp_child)

    # ------------------------------------------------------------ process
    def _new_process(self) -> None:
        """Per-process state: set at construction and again in a forked child."""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one write at a time, in order
        self._cols = _empty()
        self._buf_bytes = 0
        self._inflight_rows = self._inflight_bytes = 0  # taken by a flush, not yet on disk
        self.token = process_token()
        self._seq = 0
        self.rows_written = self.rows_dropped = self.write_errors = 0
        self._failing = False
        self._fail_streak = 0
        self._retry_at = 0.0
        self._dropped_since_ok = 0
        self._drop_logged = self._loss_logged = False
        self._last_status: dict | None = None
        self.status_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._closed:
            self._stop.set()
        elif self._start_thread:
            self._thread = threading.Thread(
                target=self._loop, args=(self._stop,), name="specdec-capture-flush", daemon=True
            )
            self._thread.start()

    def _finalize_in_mp_child(self) -> None:
        multiprocessing.util.Finalize(self, RoundWriter.close, args=(self,), exitpriority=100)

    # ------------------------------------------------------------- append
    def append_rows(self, columns: dict[str, list]) -> None:
        """Append several rows given as equal-length column lists. Rows past
        the bound are dropped (the last ones of the batch) and counted."""
        n = len(columns[FIELDS[0]])
        if not n:
            return
        nbytes = n * ROW_BYTES + sum(sum(map(len, columns[f])) for f in _STR_FIELDS)
        with self._lock:
            rows_room = self.max_rows - len(self._cols[FIELDS[0]]) - self._inflight_rows
            bytes_room = self.max_bytes - self._buf_bytes - self._inflight_bytes
            keep = n
            if n > rows_room or nbytes > bytes_room:  # slow path: keep the rows that fit
                keep, nbytes = 0, 0
                while keep < min(n, rows_room):
                    cost = _row_bytes(columns, keep)
                    if nbytes + cost > bytes_room:
                        break
                    nbytes += cost
                    keep += 1
            for name in FIELDS:
                values = columns[name]
                self._cols[name].extend(values if keep == n else values[:keep])
            self._buf_bytes += nbytes
            dropped = n - keep
            first_drop = False
            if dropped:
                self.rows_dropped += dropped
                self._dropped_since_ok += dropped
                first_drop, self._drop_logged = not self._drop_logged, True
        if first_drop:
            log.error(
                "specdec-capture: %d rows are waiting to be written, the most kept in memory "
                "(%s=%d rows, %s=%d bytes); new rows are dropped and counted until writing catches up",
                self.pending(),
                ENV_CAPTURE_MAX_ROWS,
                self.max_rows,
                ENV_CAPTURE_MAX_BYTES,
                self.max_bytes,
            )

    def pending(self) -> int:
        """Rows not yet on disk (buffered plus being written)."""
        with self._lock:
            return len(self._cols[FIELDS[0]]) + self._inflight_rows

    def pending_bytes(self) -> int:
        """Estimated bytes of the pending rows (see the module docstring)."""
        with self._lock:
            return self._buf_bytes + self._inflight_bytes

    # -------------------------------------------------------------- flush
    def retry_delay(self, failures: int) -> float:
        """Seconds before the next attempt after ``failures`` failed ones in a row."""
        return min(self.flush_s * 2 ** min(failures, 20), max(self.flush_s, MAX_RETRY_S))

    def flush(self, only_if_due: bool = False) -> int:
        """Write buffered rows to a new part file; return rows written. With
        ``only_if_due`` (the flush thread, the engine's idle hook) nothing is
        tried while a failed write's back-off runs; a plain flush always tries."""
        with self._flush_lock:
            with self._lock:
                if only_if_due and self._failing and self._clock() < self._retry_at:
                    return 0
                n = len(self._cols[FIELDS[0]])
                if n == 0:
                    return 0
                cols, self._cols = self._cols, _empty()
                nbytes, self._buf_bytes = self._buf_bytes, 0
                self._inflight_rows, self._inflight_bytes = n, nbytes
                path = self.out_dir / round_part_name(self.token, self._seq)
                self._seq += 1
            try:
                write_parquet_atomic(table_from_columns(RoundTrace, cols), path)
            except Exception as exc:  # full disk, lost mount: keep rows, retry later
                self._failed(cols, nbytes, path, exc)
                return 0
            self._written(n, path)
            return n

    def _failed(self, cols: dict[str, list], nbytes: int, path: Path, exc: Exception) -> None:
        with self._lock:
            for name in FIELDS:  # the older rows first
                cols[name].extend(self._cols[name])
            self._cols = cols
            self._buf_bytes += nbytes
            self._inflight_rows = self._inflight_bytes = 0
            self.write_errors += 1
            self._fail_streak += 1
            self._retry_at = self._clock() + self.retry_delay(self._fail_streak)
            first, self._failing = not self._failing, True
        if first:
            log.error(
                "specdec-capture: could not write %s (%s); keeping up to %d rows / %d bytes in memory "
                "and retrying, backing off to every %g s; rows past that are dropped and counted",
                path,
                exc,
                self.max_rows,
                self.max_bytes,
                max(self.flush_s, MAX_RETRY_S),
            )

    def _written(self, n: int, path: Path) -> None:
        with self._lock:
            self._inflight_rows = self._inflight_bytes = 0
            self.rows_written += n
            recovered, failures, dropped = self._failing, self._fail_streak, self._dropped_since_ok
            self._failing, self._fail_streak, self._dropped_since_ok = False, 0, 0
            self._drop_logged = False
        if recovered:
            log.warning(
                "specdec-capture: writing works again (%s, %d rows) after %d failed attempt(s); "
                "%d rows were dropped meanwhile (%d in all)",
                path,
                n,
                failures,
                dropped,
                self.rows_dropped,
            )
        elif dropped:
            log.warning(
                "specdec-capture: the buffer drained (%s, %d rows); %d rows were dropped while it was full",
                path,
                n,
                dropped,
            )

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.flush_s):
            self.flush(only_if_due=True)
            self.write_status()

    def status(self) -> dict:
        """This process's capture counters (the file ``write_status`` keeps)."""
        extra = self.status_extra() if self.status_extra is not None else {}
        return {
            "process_token": self.token,
            "pid": os.getpid(),
            "rows_written": self.rows_written,
            "rows_dropped": self.rows_dropped,
            "write_errors": self.write_errors,
            "rows_pending": self.pending(),
            **extra,
        }

    def write_status(self) -> bool:
        """Rewrite ``status-<token>.json`` in the capture folder (atomically)
        when the counters changed since the last write; never raises (a full
        disk costs the status file, counted in ``status_errors``)."""
        try:
            status = self.status()
            if status == self._last_status:
                return False
            atomic_write_text(
                self.out_dir / capture_status_name(self.token),
                json.dumps({**status, "updated_wall_ns": time.time_ns()}),
            )
            self._last_status = status
            return True
        except Exception:  # noqa: BLE001 - status is best effort; the rows matter
            self.status_errors += 1
            return False

    def close(self) -> None:
        """Stop the thread and write what is pending (idempotent)."""
        self._closed = True
        self._stop.set()
        self.flush()
        self.write_status()
        left = self.pending()
        if left and not self._loss_logged:
            self._loss_logged = True
            log.error(
                "specdec-capture: %d rows could not be written before exit and are lost (%d more were dropped earlier)",
                left,
                self.rows_dropped,
            )


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._new_process()


os.register_at_fork(after_in_child=_after_fork_in_child)
