import errno
import re

import pyarrow.parquet as pq

from specdec.capture import writer as writer_mod
from specdec.capture.writer import ROW_BYTES, RoundWriter
from specdec.runfolder import ROUND_PART_GLOB
from tests.capture.rows import rows


def _steps(directory) -> list[int]:
    return [s for p in sorted(directory.glob(ROUND_PART_GLOB))
            for s in pq.read_table(p).column("step_index").to_pylist()]


def test_flush_writes_part_files_in_order(tmp_path):
    w = RoundWriter(tmp_path, start_thread=False)
    w.append_rows(rows(3))
    assert w.flush() == 3
    w.append_rows(rows(2, start=3))
    assert w.flush() == 2 and w.flush() == 0
    parts = sorted(tmp_path.glob(ROUND_PART_GLOB))
    assert len(parts) == 2
    assert _steps(tmp_path) == [0, 1, 2, 3, 4]


def test_part_names_carry_pid_and_a_random_token(tmp_path):
    import os

    w = RoundWriter(tmp_path, start_thread=False)
    w.append_rows(rows(1))
    w.flush()
    (part,) = tmp_path.glob(ROUND_PART_GLOB)
    assert re.fullmatch(rf"rounds-{os.getpid()}-[0-9a-f]{{8}}-000000\.parquet", part.name)


def test_a_restart_under_the_same_pid_never_overwrites_parts(tmp_path):
    # Two incarnations of an engine in one folder with the same PID (a container
    # restart): each writer's first part used to be rounds-<pid>-000000.parquet.
    first = RoundWriter(tmp_path, start_thread=False)
    first.append_rows(rows(2))
    assert first.flush() == 2
    second = RoundWriter(tmp_path, start_thread=False)
    second.append_rows(rows(3, start=10))
    assert second.flush() == 3
    assert len(list(tmp_path.glob(ROUND_PART_GLOB))) == 2
    assert sorted(_steps(tmp_path)) == [0, 1, 10, 11, 12]


def test_full_disk_keeps_rows_and_retries(tmp_path, monkeypatch):
    w = RoundWriter(tmp_path, start_thread=False)
    real = writer_mod.write_parquet_atomic

    def full_disk(table, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_parquet_atomic", full_disk)
    w.append_rows(rows(3))
    assert w.flush() == 0 and w.write_errors == 1
    w.append_rows(rows(1, start=3))  # recorded while the disk is full
    assert w.pending() == 4
    monkeypatch.setattr(writer_mod, "write_parquet_atomic", real)
    assert w.flush() == 4
    assert sorted(_steps(tmp_path)) == [0, 1, 2, 3]


def test_background_thread_flushes_without_being_asked(tmp_path):
    import time

    w = RoundWriter(tmp_path, flush_s=0.05)
    w.append_rows(rows(2))
    deadline = time.monotonic() + 5
    while not list(tmp_path.glob(ROUND_PART_GLOB)) and time.monotonic() < deadline:
        time.sleep(0.02)
    w.close()
    assert w.rows_written == 2


def test_pending_bytes_estimate_is_row_bytes_plus_string_lengths(tmp_path):
    w = RoundWriter(tmp_path, start_thread=False)
    w.append_rows(rows(2))
    assert w.pending_bytes() == 2 * (ROW_BYTES + 26)
