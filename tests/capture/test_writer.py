import errno

import pyarrow.parquet as pq

from specdec.capture import writer as writer_mod
from specdec.capture.writer import FIELDS, RoundWriter


def _rows(n: int, start: int = 0) -> dict[str, list]:
    base = {
        "run_id": "r", "engine_request_id": "chatcmpl-x-0000abcd", "pid": 1, "phase": "decode",
        "tokens_proposed": 4, "tokens_accepted": 2, "tokens_emitted": 3, "batch_size": 1,
        "num_scheduled_tokens": 5, "context_len": 10, "draft_ms": 0.1, "verify_ms": 20.0,
        "wall_time_ns": 1,
    }
    cols = {f: [base[f]] * n for f in base}
    cols["step_index"] = list(range(start, start + n))
    cols["round_index"] = list(range(start, start + n))
    return {f: cols[f] for f in FIELDS}


def test_flush_writes_part_files_in_order(tmp_path):
    w = RoundWriter(tmp_path, start_thread=False)
    w.append_rows(_rows(3))
    assert w.flush() == 3
    w.append_rows(_rows(2, start=3))
    assert w.flush() == 2 and w.flush() == 0
    parts = sorted(tmp_path.glob("rounds-*.parquet"))
    assert len(parts) == 2
    steps = [s for p in parts for s in pq.read_table(p).column("step_index").to_pylist()]
    assert steps == [0, 1, 2, 3, 4]


def test_full_disk_keeps_rows_and_retries(tmp_path, monkeypatch):
    w = RoundWriter(tmp_path, start_thread=False)
    real = writer_mod.write_parquet_atomic

    def full_disk(table, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_parquet_atomic", full_disk)
    w.append_rows(_rows(3))
    assert w.flush() == 0 and w.write_errors == 1
    w.append_rows(_rows(1, start=3))  # recorded while the disk is full
    assert w.pending() == 4
    monkeypatch.setattr(writer_mod, "write_parquet_atomic", real)
    assert w.flush() == 4
    table = pq.read_table(next(tmp_path.glob("rounds-*.parquet")))
    assert sorted(table.column("step_index").to_pylist()) == [0, 1, 2, 3]


def test_background_thread_flushes_without_being_asked(tmp_path):
    import time

    w = RoundWriter(tmp_path, flush_s=0.05)
    w.append_rows(_rows(2))
    deadline = time.monotonic() + 5
    while not list(tmp_path.glob("rounds-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)
    w.close()
    assert w.rows_written == 2
