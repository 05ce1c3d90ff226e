import errno
import re

import pyarrow.parquet as pq

from specdec.capture import writer as writer_mod
from specdec.capture.writer import ROW_BYTES, RoundWriter
from specdec.runfolder import ROUND_PART_GLOB
from tests.support.capture_rows import rows


def _steps(directory) -> list[int]:
    return [
        s for p in sorted(directory.glob(ROUND_PART_GLOB)) for s in pq.read_table(p).column("step_index").to_pylist()
    ]


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


def test_status_file_is_rewritten_only_when_the_counts_change(tmp_path):
    import json

    from specdec.runfolder import capture_status_name

    w = RoundWriter(tmp_path, start_thread=False)
    w.status_extra = lambda: {"hook_failures": 0}
    assert w.write_status()
    path = tmp_path / capture_status_name(w.token)
    first = json.loads(path.read_text())
    assert (first["rows_written"], first["rows_dropped"], first["hook_failures"]) == (0, 0, 0)
    assert not w.write_status()  # nothing changed: no write
    w.append_rows(rows(2))
    w.flush()
    assert w.write_status()
    assert json.loads(path.read_text())["rows_written"] == 2
    assert not list(tmp_path.glob(".status-*"))  # written atomically: no temp file left


def test_a_failing_status_write_is_counted_and_never_touches_rows(tmp_path, monkeypatch):
    w = RoundWriter(tmp_path, start_thread=False)

    def full_disk(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "atomic_write_text", full_disk)
    w.append_rows(rows(2))
    assert not w.write_status() and w.status_errors == 1
    assert w.flush() == 2 and _steps(tmp_path) == [0, 1]


def test_consolidation_merges_the_status_files_into_the_run_folder(tmp_path):
    import json

    from specdec.replay.writing import consolidate
    from specdec.runfolder import CAPTURE_STATUS, capture_dir, capture_status_name

    cap = capture_dir(tmp_path)
    w = RoundWriter(cap, start_thread=False)
    w.status_extra = lambda: {"hook_failures": 1, "run_id": "r"}
    w.append_rows(rows(2))
    w.flush()
    w.write_status()
    (cap / capture_status_name("7-bad")).write_text("[not, an object")
    consolidate(tmp_path)
    merged = json.loads((tmp_path / CAPTURE_STATUS).read_text())
    assert [(m["process_token"], m["rows_written"], m["hook_failures"]) for m in merged] == [(w.token, 2, 1)]
    assert (tmp_path / "rounds.parquet").exists()
    assert [p.name for p in cap.iterdir()] == [capture_status_name("7-bad")]  # unreadable: left in place
