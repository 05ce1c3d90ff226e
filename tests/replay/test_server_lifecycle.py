"""Whoever starts a server owns it (issue 20, item 8; ``specdec/engines/lifecycle.py``).

A parent process (``tests/support/server_owner.py``) starts a fake server
(``tests/support/stubborn_server.py``: a child of its own, SIGTERM ignored
during its start-up) through ``ServerProcess``, as every embedded server is
started; the test signals the parent in each phase and then finds no process
of the server's group left. Every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specdec.engines.lifecycle import group_members

SUPPORT = Path(__file__).parents[1] / "support"
OWNER = SUPPORT / "server_owner.py"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return True


def _wait_for(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Owner:
    """The parent process and the server group it started (pids from the server's pid file)."""

    def __init__(
        self, tmp: Path, startup_s: float, grace_s: float = 10.0, stubborn: bool = False, thread: bool = False
    ):
        self.pidfile = tmp / "server.pids"
        self.log = tmp / "server.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(OWNER),
                str(self.log),
                str(self.pidfile),
                str(startup_s),
                str(grace_s),
                *(["--stubborn"] if stubborn else []),
                *(["--thread"] if thread else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.server = self.child = None

    def server_pids(self, timeout_s: float = 30) -> tuple[int, int]:
        _wait_for(lambda: self.pidfile.exists() or self.proc.poll() is not None, timeout_s, "the server's pid file")
        assert self.pidfile.exists(), self.proc.communicate(timeout=5)
        self.server, self.child = map(int, self.pidfile.read_text().split())
        return self.server, self.child

    def wait_ready(self, timeout_s: float = 30) -> None:
        line = self.proc.stdout.readline()  # bounded: the owner gives up after its 60 s start-up timeout
        assert line.strip() == "READY", (line, self.proc.stderr.read())
        self.server_pids(timeout_s)

    def exit_within(self, timeout_s: float) -> float:
        started = time.monotonic()
        self.proc.wait(timeout=timeout_s)
        return time.monotonic() - started

    def assert_nothing_left(self) -> None:
        assert group_members(self.server) == 0, [
            p.info for p in psutil.process_iter(["pid", "cmdline"]) if _pgid(p.pid) == self.server
        ]
        assert _gone(self.server) and _gone(self.child)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.server is not None:
            try:
                os.killpg(self.server, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.stdout.close()
        self.proc.stderr.close()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.fixture
def owner(tmp_path):
    made: list[Owner] = []

    def make(**kw) -> Owner:
        made.append(Owner(tmp_path, **kw))
        return made[-1]

    yield make
    for o in made:
        o.cleanup()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_start_up_stops_the_start_and_kills_the_group_at_once(owner, sig):
    o = owner(startup_s=60)  # the server ignores SIGTERM for a minute
    o.server_pids()
    time.sleep(0.3)
    o.proc.send_signal(sig)
    assert o.exit_within(10) < 5  # not after the server's start-up, nor after a grace period
    assert o.proc.returncode != 0
    o.assert_nothing_left()
    assert "start-up ended (KeyboardInterrupt)" in o.log.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_serving_stops_the_server_and_its_child(owner, sig):
    o = owner(startup_s=0.5)
    o.wait_ready()
    o.proc.send_signal(sig)
    assert o.exit_within(20) < 5  # the server stops on SIGTERM: no need for the grace period
    o.assert_nothing_left()
    log = o.log.read_text()
    assert "stopping the server on purpose (SIGTERM to its process group" in log
    assert "server stopped: exited on SIGTERM" in log


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(owner):
    o = owner(startup_s=0.5, grace_s=2, stubborn=True)
    o.wait_ready()
    o.proc.send_signal(signal.SIGTERM)
    took = o.exit_within(20)
    assert 2 <= took < 10
    o.assert_nothing_left()
    assert "server stopped: killed (SIGKILL)" in o.log.read_text()


def test_a_second_signal_during_the_stop_kills_at_once_and_still_leaves_nothing(owner):
    o = owner(startup_s=0.5, grace_s=30, stubborn=True)
    o.wait_ready()
    o.proc.send_signal(signal.SIGTERM)
    _wait_for(lambda: "stopping the server on purpose" in o.log.read_text(), 10, "the stop to begin")
    o.proc.send_signal(signal.SIGINT)
    assert o.exit_within(20) < 8  # not the 30 s grace period
    o.assert_nothing_left()
    assert "server stopped: killed (SIGKILL)" in o.log.read_text()


def test_an_exception_in_the_owner_stops_the_server(tmp_path):
    """The normal and the exception exit paths, in this process."""
    from specdec.engines.server import ServerProcess, free_port

    port = free_port()
    pidfile = tmp_path / "pids"
    cmd = [sys.executable, str(SUPPORT / "stubborn_server.py"), str(port), str(pidfile), "--startup-s", "0.2"]
    with pytest.raises(RuntimeError):
        with ServerProcess(cmd, {}, tmp_path / "log", port, startup_timeout_s=30):
            raise RuntimeError("boom")
    server, child = map(int, pidfile.read_text().split())
    assert group_members(server) == 0 and _gone(child)

    port = free_port()
    cmd[2] = str(port)
    with ServerProcess(cmd, {}, tmp_path / "log", port, startup_timeout_s=30) as srv:
        pass
    server, child = map(int, pidfile.read_text().split())
    assert srv.proc.pid == server and group_members(server) == 0 and _gone(child)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_the_owner_reaches_the_server_through_pdeathsig(owner):
    """No handler sees a SIGKILL of specdec: the kernel sends the direct child
    SIGTERM (PDEATHSIG); this server, like vLLM's API server, then stops its
    own child. A child that did not would be left: PDEATHSIG covers the direct
    child only, which is why every other exit path kills the whole group."""
    o = owner(startup_s=0.5)
    o.wait_ready()
    o.proc.send_signal(signal.SIGKILL)
    o.exit_within(5)
    _wait_for(lambda: group_members(o.server) == 0, 10, "the server group to stop after its parent's SIGKILL")
    o.assert_nothing_left()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_server_started_from_a_worker_thread_that_has_ended_still_dies_with_its_owner(owner, sig):
    """PDEATHSIG is tied to the thread that forked, not to the process: a server
    started from a short-lived worker thread (a restart in the event loop, a test
    fixture's thread) used to outlive its owner when the owner was SIGKILLed or
    ended by a signal it had no handler for (pytest under SIGTERM). The fork is
    made by the process-long spawner thread, so the kernel stops the server."""
    o = owner(startup_s=0.5, thread=True)
    o.wait_ready()
    o.proc.send_signal(sig)
    o.exit_within(5)
    _wait_for(lambda: group_members(o.server) == 0, 10, "the server group to stop after its parent died")
    o.assert_nothing_left()


def test_cancelling_a_start_in_a_worker_thread_kills_its_group_before_the_cancellation_goes_on(tmp_path):
    """A restart inside the event loop starts servers in a worker thread
    (``lifecycle.in_thread``): Ctrl-C there cancels the await; the thread's
    start-up wait must end too (not at the server's 60 s start-up)."""
    import asyncio

    from specdec.engines.lifecycle import in_thread
    from specdec.engines.server import ServerProcess, free_port

    port, pidfile = free_port(), tmp_path / "pids"
    cmd = [sys.executable, str(SUPPORT / "stubborn_server.py"), str(port), str(pidfile), "--startup-s", "60"]

    async def main() -> float:
        task = asyncio.ensure_future(
            in_thread(ServerProcess(cmd, {}, tmp_path / "log", port, startup_timeout_s=120).__enter__)
        )
        deadline = time.monotonic() + 30
        while not pidfile.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    took = asyncio.run(asyncio.wait_for(main(), 60))
    server, child = map(int, pidfile.read_text().split())
    try:
        assert took < 5
        assert group_members(server) == 0 and _gone(child)
    finally:
        try:
            os.killpg(server, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_start_all_starts_the_servers_at_once_and_a_failed_one_leaves_none_running(tmp_path):
    """``start_all`` launches every server before it waits for any (two 3 s start-ups take
    under 6 s together: one after the other they cannot, however slow the host; 1.5 s ones
    took 2.97 s on a loaded host, 2026-12-07), and when one never gets healthy the others it
    started are stopped with it: no process of any group is left."""
    import contextlib

    from specdec.engines.server import ServerProcess, free_port, start_all
    from specdec.errors import SpecdecError

    def fake(name: str, startup_s: float, port: int | None = None) -> tuple[ServerProcess, Path]:
        pidfile = tmp_path / f"{name}.pids"
        port = port or free_port()
        cmd = [
            sys.executable,
            str(SUPPORT / "stubborn_server.py"),
            str(port),
            str(pidfile),
            "--startup-s",
            str(startup_s),
        ]
        return ServerProcess(cmd, {}, tmp_path / f"{name}.log", port, startup_timeout_s=30), pidfile

    (a, pa), (b, pb) = fake("a", 3.0), fake("b", 3.0)
    assert a.port != b.port
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        start_all(stack, [a, b])
        took = time.monotonic() - t0
        assert a._healthy(2) and b._healthy(2)
    assert took < 6.0, f"the two start-ups took {took:.1f} s: one after the other"
    for pidfile in (pa, pb):
        server, child = map(int, pidfile.read_text().split())
        assert group_members(server) == 0 and _gone(child)

    good, pgood = fake("good", 0.2)
    bad = ServerProcess(
        [sys.executable, "-c", "import sys; sys.exit(3)"], {}, tmp_path / "bad.log", free_port(), startup_timeout_s=30
    )
    with pytest.raises(SpecdecError, match="exited with code 3"):
        with contextlib.ExitStack() as stack:
            start_all(stack, [good, bad])
    server, child = map(int, pgood.read_text().split())
    assert group_members(server) == 0 and _gone(child)
