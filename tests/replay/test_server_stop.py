"""Stopping an embedded server waits for its whole process group: vLLM's API
server can exit before its engine core, which writes its last capture part on
shutdown, and the run folder is consolidated right after the stop."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from specdec.engines.lifecycle import group_members, wait_group


def test_the_stop_waits_for_a_child_that_outlives_the_leader(tmp_path):
    marker = tmp_path / "written-at-shutdown"
    leader = subprocess.Popen(["bash", "-c", f"(sleep 1; touch {marker}) & exit 0"], start_new_session=True)
    leader.wait()
    assert group_members(leader.pid) >= 1 and not marker.exists()  # the leader is gone, its children are not
    assert wait_group(leader.pid, timeout_s=10) == 0
    assert marker.exists()  # what the child wrote on its way out is there when the wait returns


def test_a_child_that_does_not_exit_is_counted_after_the_timeout():
    leader = subprocess.Popen(["bash", "-c", "sleep 30 & exit 0"], start_new_session=True)
    leader.wait()
    started = time.monotonic()
    try:
        assert wait_group(leader.pid, timeout_s=0.5) >= 1
        assert time.monotonic() - started < 5
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
    assert wait_group(leader.pid, timeout_s=5) == 0
