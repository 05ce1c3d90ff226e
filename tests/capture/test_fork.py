"""Capture across fork: vLLM forks its engine core (and workers) from a process
in which the plugin is registered. Each check runs in a fresh interpreter, so
the test process itself is never forked with threads running."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = r"""
import multiprocessing, os, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from specdec.capture.plugin import hooks as plugin
from specdec.runfolder import ROUND_PART_GLOB
from tests.support.capture_rows import rows

out = Path(sys.argv[1])

def parts_of(pid):
    return sorted(out.glob(f"rounds-{pid}-*.parquet"))

def column(parts, name):
    return [v for p in parts for v in pq.read_table(p).column(name).to_pylist()]
"""

FORK_AND_DIE = (
    PRELUDE
    + r"""
st = plugin._State(out, "fork-test", flush_s=0.2)
plugin._STATE = st
st.writer.append_rows(rows(3, pid=os.getpid()))  # the parent's, not yet written
st.step_index, st.rounds_by_request, st.exec_ns, st.prev_propose_ms = 7, {"a": 3}, 5, 1.5
parent_token = st.writer.token
held = st.writer._lock
held.acquire()  # as if the parent's flush thread held the lock at the fork
child = os.fork()
if child == 0:
    code = 3
    try:
        assert (st.pid, st.step_index, st.rounds_by_request, st.exec_ns, st.prev_propose_ms) == (
            os.getpid(), 0, {}, 0, None)
        assert st.writer.pending() == 0 and st.writer.token != parent_token
        st.writer.append_rows(rows(2, start=100, pid=st.pid))
        # no flush(), no close(): only the child's own flush thread can write
        # these; stop once they are on disk (or give up), then die without hooks
        deadline = time.monotonic() + 20
        while not parts_of(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        code = 0
    finally:
        os._exit(code)
held.release()
_, status = os.waitpid(child, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
st.writer.close()
assert column(parts_of(child), "step_index") == [100, 101], "the child's rows did not reach disk"
assert set(column(parts_of(child), "pid")) == {child}
assert column(parts_of(os.getpid()), "step_index") == [0, 1, 2]
assert sorted(column(sorted(out.glob(ROUND_PART_GLOB)), "step_index")) == [0, 1, 2, 100, 101]
print("OK")
"""
)

MP_CHILD_RETURNS = (
    PRELUDE
    + r"""
st = plugin._State(out, "fork-test", flush_s=600)  # the thread will not flush in time

def engine_core():  # returns normally; multiprocessing then leaves by os._exit
    plugin.state().writer.append_rows(rows(2, start=50, pid=os.getpid()))

proc = multiprocessing.get_context("fork").Process(target=engine_core)
plugin._STATE = st
proc.start()
proc.join(60)
assert proc.exitcode == 0, proc.exitcode
assert column(parts_of(proc.pid), "step_index") == [50, 51], "the child's rows were lost at exit"
print("OK")
"""
)


def _run(code: str, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr


def test_forked_child_writes_its_rows_without_exit_hooks_and_parent_rows_once(tmp_path):
    _run(FORK_AND_DIE, tmp_path)


def test_multiprocessing_fork_child_flushes_at_its_exit(tmp_path):
    _run(MP_CHILD_RETURNS, tmp_path)
