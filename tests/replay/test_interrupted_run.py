"""Issue 24: a replay stopped by SIGTERM or Ctrl-C (SIGINT) writes its
requests in flight as failed rows (``interrupted``), says how many rows it
wrote and lost, and exits non-zero (128 + the signal). Run as a separate
process against a slow fake server, as a supervisor would stop it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.fake_server import EndlessVllm, threaded

REPLAY = Path(sys.executable).parent / "specdec-replay"


def _traffic(path: Path) -> Path:
    rows = [
        {"prompt_id": f"p{i}", "category": "chat", "prompt": f"Say hello {i}.", "max_tokens": 8, "temperature": 0.0}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_replay_records_its_requests_in_flight_and_exits_non_zero(tmp_path, sig, status):
    traffic = _traffic(tmp_path / "t.jsonl")
    slow = EndlessVllm(gap_s=1.0)  # a chunk a second: a request takes 25 s before it is overlong
    with threaded(slow, EndlessVllm(gap_s=1.0)) as (base, spec):
        proc = subprocess.Popen(
            [
                str(REPLAY),
                str(traffic),
                "--baseline-url",
                base,
                "--speculative-url",
                spec,
                "--levels",
                "2",
                "--repeats",
                "1",
                "--warmup",
                "0",
                "--request-timeout",
                "10",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--run-id",
                "x",
                "--no-progress",
                "--no-lossless-pass",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while slow.in_flight < 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert slow.in_flight == 2, "the replay never had two requests in flight"
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
    assert proc.returncode == status, (out, err)
    assert "0 request rows written" not in err
    assert "2 request rows written (2 of them cut off in flight" in err and "0 rows lost" in err, err
    assert "Traceback" not in err
    table = pq.read_table(tmp_path / "runs" / "x" / "requests.parquet")
    assert table.column("error_type").to_pylist() == ["interrupted", "interrupted"]
    assert table.column("level").to_pylist() == [2, 2]
    manifest = json.loads((tmp_path / "runs" / "x" / "manifest.json").read_text())
    assert manifest["finished"] is False
