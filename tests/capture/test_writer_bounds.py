"""A full disk with a bounded buffer: nothing grows without bound, nothing is
dropped silently, and what was kept is written once the disk recovers."""

import errno
import logging

import pyarrow.parquet as pq
import pytest

from specdec.capture import writer as writer_mod
from specdec.capture.writer import ROW_BYTES, RoundWriter
from specdec.runfolder import ROUND_PART_GLOB
from tests.support.capture_rows import rows

ROW = ROW_BYTES + 26  # estimated bytes of one test row


class Disk:
    """write_parquet_atomic that fails while ``full`` and counts its calls."""

    def __init__(self):
        self.full = True
        self.calls = 0
        self.real = writer_mod.write_parquet_atomic

    def __call__(self, table, path):
        self.calls += 1
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.real(table, path)


@pytest.fixture
def disk(monkeypatch):
    d = Disk()
    monkeypatch.setattr(writer_mod, "write_parquet_atomic", d)
    return d


def _messages(caplog, level):
    return [r.getMessage() for r in caplog.records if r.name == "specdec.capture" and r.levelno == level]


def test_row_bound_drops_and_counts_then_recovery_writes_what_was_kept(tmp_path, disk, caplog):
    caplog.set_level(logging.INFO, logger="specdec.capture")
    w = RoundWriter(tmp_path, start_thread=False, max_rows=5)
    w.append_rows(rows(3))
    assert w.flush() == 0
    w.append_rows(rows(4, start=3))  # 2 fit, 2 dropped
    assert (w.pending(), w.rows_dropped) == (5, 2)
    assert w.flush() == 0  # still full: rows stay, the bound holds
    w.append_rows(rows(1, start=7))
    assert (w.pending(), w.rows_dropped, w.write_errors) == (5, 3, 2)
    errors = _messages(caplog, logging.ERROR)
    assert len(errors) == 2  # once "writing fails", once "dropping" (not per attempt or per row)
    assert "could not write" in errors[0] and "No space left" in errors[0]
    assert "dropped and counted" in errors[1] and "SPECDEC_CAPTURE_MAX_ROWS=5" in errors[1]

    disk.full = False
    assert w.flush() == 5
    (part,) = tmp_path.glob(ROUND_PART_GLOB)
    assert pq.read_table(part).column("step_index").to_pylist() == [0, 1, 2, 3, 4]
    (recovered,) = _messages(caplog, logging.WARNING)
    assert "writing works again" in recovered and "3 rows were dropped meanwhile" in recovered
    assert (w.pending(), w.rows_written, w.rows_dropped) == (0, 5, 3)


def test_byte_bound_keeps_the_rows_that_fit(tmp_path, disk):
    w = RoundWriter(tmp_path, start_thread=False, max_bytes=3 * ROW + 100)
    w.append_rows(rows(2))
    w.flush()
    w.append_rows(rows(4, start=2))  # room for 1 more row by bytes
    assert (w.pending(), w.pending_bytes(), w.rows_dropped) == (3, 3 * ROW, 3)
    disk.full = False
    assert w.flush() == 3


def test_rows_appended_during_a_failed_write_stay_within_the_bound(tmp_path, monkeypatch):
    # The engine keeps appending while the flush thread is inside a failing
    # write: rows in flight count against the bound too.
    w = RoundWriter(tmp_path, start_thread=False, max_rows=4)

    def fails_while_engine_appends(table, path):
        w.append_rows(rows(5, start=100))  # only 1 fits beside the 3 in flight
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_parquet_atomic", fails_while_engine_appends)
    w.append_rows(rows(3))
    w.flush()
    assert (w.pending(), w.rows_dropped) == (4, 4)
    monkeypatch.undo()
    assert w.flush() == 4


def test_failed_writes_back_off_and_a_plain_flush_still_tries(tmp_path, disk):
    now = [0.0]
    w = RoundWriter(tmp_path, flush_s=1.0, start_thread=False, clock=lambda: now[0])
    w.append_rows(rows(2))
    w.flush(only_if_due=True)  # attempt 1 fails at t=0: next one due at t=2
    now[0] = 1.0
    w.flush(only_if_due=True)
    assert disk.calls == 1
    now[0] = 2.0
    w.flush(only_if_due=True)  # attempt 2 fails: next due at 2 + 4
    now[0] = 5.0
    w.flush(only_if_due=True)
    assert disk.calls == 2
    w.flush()  # the shutdown hook and close() do not wait
    assert disk.calls == 3
    disk.full = False
    assert w.flush(only_if_due=True) == 0  # not due yet
    now[0] = 100.0
    assert w.flush(only_if_due=True) == 2
    assert [w.retry_delay(n) for n in (1, 2, 3, 4, 5, 10)] == [2, 4, 8, 16, 30, 30]


def test_rows_lost_at_close_are_logged(tmp_path, disk, caplog):
    w = RoundWriter(tmp_path, start_thread=False)
    w.append_rows(rows(2))
    w.close()
    assert any("2 rows could not be written before exit" in m for m in _messages(caplog, logging.ERROR))
    w._new_process()  # forget them: the test process's own exit must not write them later
