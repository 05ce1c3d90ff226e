"""SIGTERM and SIGINT during ``specdec analytics build``, ``specdec plan`` and the plan cache's write
(issue 42, item 6): one line on standard error, exit 143 or 130, no temporary file or DuckDB log
left, the previous database (and plan) kept. Before, SIGTERM left ``.specdec.duckdb.<random>.tmp``
and ``.wal`` files and SIGINT ended in a "Query interrupted" traceback with exit 1.

Each case runs the real CLI in a subprocess with one hook (``DRIVER``) that makes the moment
deterministic: at the chosen point it writes a file the test waits for, then runs a DuckDB query
that would take a minute (or a Python loop), so the signal lands in the middle of the work."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdec.analytics.build import build
from specdec.analytics.plan import inputs
from tests.support import plan_run
from tests.support.synthetic_run import write_run

ROOT = Path(__file__).resolve().parents[2]

#: argv: ready-file, hook, then the specdec CLI's arguments. The hooks: 'mart' (the build's first
#: stored mart runs a long query on the build's connection), 'bootstrap' (the planner's bootstrap
#: loops in Python), 'cache' (the plan cache's write runs a long query on the planning connection
#: with two of its three tables written into the temporary file).
DRIVER = r"""
import sys, time
from pathlib import Path

ready, hook, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
LONG = "select count(*) from range(100000) a, range(100000) b where a.range * b.range = -1"

if hook == "mart":
    from specdec.analytics import build as b
    real = b._materialize
    def _materialize(con, m, schema=b.STORED, steps=b._NO_STEPS, **kw):
        if schema == b.STORED and not ready.exists():
            ready.write_text("mart")
            con.execute(LONG).fetchall()
        return real(con, m, schema, steps, **kw)
    b._materialize = _materialize
elif hook == "bootstrap":
    from specdec.analytics.plan import run
    real = run.predictions
    def predictions(*a, **kw):
        ready.write_text("bootstrap")
        for _ in range(600):
            time.sleep(0.1)
        return real(*a, **kw)
    run.predictions = predictions
elif hook == "cache":
    from specdec.analytics.plan import inputs
    real = inputs._write_cache
    class Slow:
        def __init__(self, con):
            self.con = con
        def execute(self, sql, *a):
            if sql.startswith(f"create table plan_cache_new.{inputs.MET_TABLE}"):
                ready.write_text("cache")
                self.con.execute(LONG).fetchall()
            return self.con.execute(sql, *a)
    inputs._write_cache = lambda con, path, key: real(Slow(con), path, key)

from specdec.cli.main import main
sys.argv = ["specdec", *args]
main()
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("signals") / "run"
    run.mkdir()
    write_run(
        run,
        plan_run.make_counters(plan_run.CLASSIC),
        requests=plan_run.make_requests(plan_run.CLASSIC, lambda *a: 1000.0),
        rounds=plan_run.make_rounds(plan_run.CLASSIC),
        manifest=plan_run._manifest(plan_run.CLASSIC),
    )
    build(run)
    return run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _litter(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.rglob("*") if p.name.endswith((".tmp", ".wal")))


def _interrupt(tmp_path, hook: str, sig: signal.Signals, args: list[str]) -> subprocess.CompletedProcess:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(ready), hook, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the hook was never reached"
            time.sleep(0.05)
        time.sleep(0.2)  # inside the long query or loop
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _assert_clean_stop(res, sig: signal.Signals, folder: Path) -> None:
    assert res.returncode == 128 + sig, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"interrupted by {sig.name}" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert _litter(folder) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_analytics_build_stops_cleanly_and_keeps_the_previous_database(run_dir, tmp_path, sig):
    db = run_dir / "specdec.duckdb"
    before = _digest(db)
    res = _interrupt(tmp_path, "mart", sig, ["analytics", "build", str(run_dir), "--no-progress"])
    _assert_clean_stop(res, sig, run_dir)
    assert _digest(db) == before


def test_plan_stops_cleanly_while_it_builds(run_dir, tmp_path):
    db = run_dir / "specdec.duckdb"
    before = _digest(db)
    res = _interrupt(tmp_path, "mart", signal.SIGTERM, ["plan", str(run_dir), "-o", str(tmp_path / "plan")])
    _assert_clean_stop(res, signal.SIGTERM, run_dir)
    assert _digest(db) == before
    assert not (tmp_path / "plan").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_plan_stops_cleanly_in_its_bootstrap_and_keeps_the_previous_plan(run_dir, tmp_path, sig):
    out = tmp_path / "plan"
    out.mkdir()
    (out / "plan.json").write_text('{"previous": true}\n')
    db = run_dir / "specdec.duckdb"
    args = ["plan", str(run_dir), "-o", str(out), "--db", str(db), "--replicates", "40"]
    res = _interrupt(tmp_path, "bootstrap", sig, args)
    _assert_clean_stop(res, sig, run_dir)
    _assert_clean_stop(res, sig, out)
    assert (out / "plan.json").read_text() == '{"previous": true}\n'
    assert sorted(p.name for p in out.iterdir()) == ["plan.json"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_plan_cache_write_stops_cleanly(run_dir, tmp_path, sig):
    db = run_dir / "specdec.duckdb"
    cache = inputs.cache_path(db)
    cache.unlink(missing_ok=True)
    before = _digest(db)
    args = ["plan", str(run_dir), "-o", str(tmp_path / "plan"), "--db", str(db), "--replicates", "40"]
    res = _interrupt(tmp_path, "cache", sig, args)
    _assert_clean_stop(res, sig, run_dir)
    assert not cache.exists()
    assert _digest(db) == before


def test_the_signal_stops_python_code_even_when_the_waker_thread_heard_it_first():
    from specdec.analytics import build as b

    reached_the_end = False
    with pytest.raises(b.Interrupted) as stopped:
        with b.interruptible():
            assert b._guard is not None
            b._guard.note(signal.SIGTERM)  # the waker thread noted it before the handler ran
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(200):  # the handler runs in here, between two sleeps
                time.sleep(0.01)
            reached_the_end = True
    assert not reached_the_end
    assert stopped.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are given back
