"""A sidecar that stops with rows it could not write exits 1 and says how
many: the CLI sidecar (with its proxy) in a process whose Parquet writes all
fail as a full disk does, stopped by SIGTERM after one proxied request (issue 24).
Without the full disk the same run exits 0 (tests/capture/test_sidecar.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

from specdec.capture.sidecar.service import rows_lost
from tests.support.fake_server import FakeVllm, threaded

#: The capture CLI in a process whose disk is full: every Parquet write fails as ENOSPC would.
DISK_FULL = (
    "import errno, specdec.schemas.arrow as arrow\n"
    "def full(table, path):\n"
    "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "arrow.write_parquet_atomic = full\n"
    "from specdec.cli.capture import main\n"
    "main()\n"
)


def test_a_sidecar_that_stops_with_rows_it_could_not_write_exits_1_and_says_how_many(tmp_path):
    fake = FakeVllm()
    with threaded(fake) as (server,):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                DISK_FULL,
                "sidecar",
                "--capture-dir",
                str(tmp_path / "cap"),
                "--lake",
                str(tmp_path / "lake"),
                "--server",
                server,
                "--listen",
                "127.0.0.1:0",
                "--proxy-listen",
                "127.0.0.1:0",
                "--compact-s",
                "3600",
                "--scrape-s",
                "3600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            proc.stdout.readline()
            proxy_url = proc.stdout.readline().split("listening on ")[1].split()[0]
            body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
            req = urllib.request.Request(
                proxy_url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200 and r.read()
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "specdec proxy stopped: 0 rows written" in out and "specdec sidecar stopped:" in out
    assert proc.returncode == 1, (out, err)
    # the first scrape and the one taken at the stop; the one proxied request
    assert "Error: sidecar stopped with rows lost: 2 counter rows not written to the lake" in err
    assert "1 recorded proxy rows not written" in err and "No space left on device" in err
    assert "Traceback" not in err


def test_rows_lost_counts_pending_and_dropped_rows_and_nothing_is_none():
    summary = {"counter_rows_not_written": 0, "specdec_sidecar_counter_rows_dropped_total": 0}
    proxy = {"rows_pending": 0, "rows_dropped": 0, "last_error": None}
    assert rows_lost(summary, proxy) is None and rows_lost(summary, None) is None
    text = rows_lost(
        {**summary, "counter_rows_not_written": 2, "specdec_sidecar_counter_rows_dropped_total": 5},
        {**proxy, "rows_pending": 1, "rows_dropped": 3, "last_error": "OSError: disk full"},
    )
    assert "7 counter rows not written to the lake (2 still pending at the stop, 5 dropped" in text
    assert "4 recorded proxy rows not written (1 still pending at the stop, 3 dropped" in text
    assert "OSError: disk full" in text
