"""Start and stop a local engine server for one arm, whatever the engine: the shared
``ServerProcess`` (launch in its own process group, wait for health, stop), free ports, CPU
cores for servers side by side, and ``start_all``. Each engine's own server is in its
package: ``engines/vllm/server.py`` (``VllmServer``), ``engines/llama_cpp/server.py``
(``LlamaServer``).

Both arms get the same argument list; only the speculative settings differ. The capture
plugin is switched on through a vLLM server's environment.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from specdec.defaults import STARTUP_TIMEOUT_S
from specdec.engines.lifecycle import GRACE_S, OwnedGroup, interrupt_on_signals, spawn

#: ports handed out lately: servers launched together have not bound theirs yet
_GIVEN: collections.deque[int] = collections.deque(maxlen=64)


def free_port() -> int:
    """A free loopback port, never one of the last 64 handed out (servers
    launched at once bind theirs only later)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.append(port)
            return int(port)


class ServerProcess:
    """Context manager: an engine's server subprocess, owned as
    ``specdec/engines/lifecycle.py`` says (its own process group, an
    interruptible start-up wait, SIGTERM then SIGKILL to the group on every
    exit path), logged to ``log_path``, healthy when ``GET health_path``
    answers 200. The engine-specific part is the command and environment
    (``VllmServer`` for vLLM, ``LlamaServer``)."""

    label = "server"
    #: seconds between SIGTERM and SIGKILL when the server is stopped (``lifecycle.GRACE_S``)
    grace_s = GRACE_S
    #: what the marker line before a deliberate stop adds about the engine's own shutdown messages
    stop_note = ""

    def __init__(
        self,
        cmd: list[str],
        extra_env: dict[str, str],
        log_path: Path,
        port: int,
        health_path: str = "/health",
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ):
        self.cmd, self.extra_env, self.log_path, self.port = cmd, extra_env, log_path, port
        self.health_path, self.startup_timeout_s = health_path, startup_timeout_s
        self.group: OwnedGroup | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._signals = contextlib.ExitStack()

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.group.proc if self.group is not None else None

    def __enter__(self) -> ServerProcess:
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> None:
        """Spawn the server and return at once (``wait_ready`` waits for it):
        ``start_all`` launches several before it waits for any. On failure
        nothing is left running."""
        env = dict(os.environ)
        env.update(self.extra_env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            # SIGTERM and SIGHUP raise like Ctrl-C while the server is ours (unless someone, e.g. the
            # run's ``recording``, already handles them), so the stop in __exit__ runs
            self._signals.enter_context(interrupt_on_signals(replace=False))
            self.group = spawn(self.cmd, env, self._log)
        except BaseException:
            self._close()
            raise

    def wait_ready(self) -> None:
        """Wait until the launched server answers its health check; on a failure
        (it exited, the time ran out, an interrupt) its group is killed first."""
        assert self.group is not None, "wait_ready before launch"
        try:
            self.group.wait_ready(
                self._healthy,
                self.startup_timeout_s,
                on_exit=lambda code: (
                    f"{self.label} exited with code {code} during start-up; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                ),
                on_timeout=lambda: (
                    f"{self.label} not healthy after {self.startup_timeout_s:.0f}s; "
                    f"see {self.log_path}:\n{self.log_tail()}"
                ),
            )
        except BaseException as exc:  # wait_ready has killed the group already
            self._mark(f"start-up ended ({type(exc).__name__}): the server's process group was killed")
            self._close()
            raise

    def _healthy(self, timeout_s: float) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}{self.health_path}", timeout=timeout_s) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def log_tail(self, n: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def _mark(self, text: str) -> None:
        """A line of specdec's own in the server log (flushed in order)."""
        try:
            self._log.flush()
            self._log.write(f"==== specdec {time.strftime('%H:%M:%S')}: {text} ====\n".encode())
            self._log.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def stop(self, grace_s: float = GRACE_S, *, redeliver: bool = True) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace_s``
        (``lifecycle.OwnedGroup.stop``). It waits for the whole group: vLLM's
        API server can exit before its engine core, which writes its last
        capture part on shutdown, and the run folder is consolidated after.

        vLLM's normal shutdown logs warnings that read like failures (the API
        server "force killing" EngineCore and its worker, nanobind "leaked"
        lists from triton, resource_tracker "leaked semaphore/shared_memory").
        A marker line before and after says the stop was specdec's and how the
        process ended, so a reader can tell them from a real crash."""
        if self.group is None:
            return
        proc = self.group.proc
        if proc.poll() is not None and not self.group.members():
            self._mark(f"the server had already exited with code {proc.returncode} before specdec stopped it")
            return
        self._mark(
            f"stopping the server on purpose (SIGTERM to its process group, SIGKILL after "
            f"{grace_s:g} s).{self.stop_note}"
        )
        out = self.group.stop(grace_s, redeliver=redeliver)
        left = f"; {out.left} process(es) of its group still there after SIGKILL" if out.left else ""
        self._mark(f"server stopped: {out.how} in {out.seconds:.1f} s (exit code {proc.returncode}){left}")

    def _close(self) -> None:
        self._signals.close()
        with contextlib.suppress(OSError, AttributeError):
            self._log.close()

    def __exit__(self, exc_type: type[BaseException] | None = None, *exc: object) -> None:
        try:
            # a signal during a stop that is itself part of an interrupt only hurries it (SIGKILL now)
            self.stop(self.grace_s, redeliver=exc_type is None)
        finally:
            self._close()


def separate_cores(n: int) -> list[str | None]:
    """A VLLM_CPU_OMP_THREADS_BIND value per server for ``n`` vLLM CPU servers alive at once: one
    allowed core each, distinct, in order; all None (vLLM's 'auto') when the process may use fewer
    than ``n`` cores or OMP_NUM_THREADS is set (then each worker computes on more than one thread).

    Why: vLLM 0.32's 'auto' binds every server's CPU worker to the same core (the first of the
    NUMA node: "core ids=[0], reserved_cpus=[1]" in each server's log on a 2-core host), and it
    serves on one torch thread (``vllm/utils/torch_utils.py``: "Reducing Torch threads from 2 to 1
    for serving"). A worker also busy-polls its message queue for 1 s after its last step
    (``vllm/distributed/device_communicators/shm_broadcast.py``, ``SpinCondition(busy_loop_s=1)``),
    so when requests alternate between two servers, each one starts beside the other's spinning
    worker on its own core. Measured on this project's 2-core host (2026-12-04, /tmp/i22x/bind.py:
    a 32-token greedy request alternated between the compat pair, 7 timed per server): the
    baseline at 88.2 ms per token (median; 57.9-91.4) with both on core 0 against 60.3 alone and
    59.3 on a core of its own; the ngram server 46.8 / 45.6 / 46.5. One core each costs nothing
    (one thread computes either way) and removes the interference."""
    if "OMP_NUM_THREADS" in os.environ:
        return [None] * n
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n:
        return [None] * n
    return [str(c) for c in cores[:n]]


def start_all(stack: contextlib.ExitStack, servers: list[ServerProcess]) -> None:
    """Start ``servers`` at once and wait until every one is healthy: each is
    launched, pushed on ``stack`` (which stops it however the run ends), and
    only then waited for. Two vLLM servers start in about the time of one on
    two cores (most of a start is one process importing and loading), which
    matters when every repeat starts fresh servers (BENCHMARKS.md, issue 19).
    The first failure raises; the servers already on ``stack`` are stopped
    when it closes."""
    ready: list[ServerProcess] = []
    current: ServerProcess | None = None  # the one launching or waited for: a failure there cleans up itself
    try:
        for current in servers:
            current.launch()
            stack.push(current)
        for current in servers:
            current.wait_ready()
            ready.append(current)
    except BaseException as exc:
        # every other server still starting is killed at once, as a failed start is (an
        # engine loading its model may ignore SIGTERM until it is done)
        for srv in servers:
            if srv is not current and srv not in ready and srv.group is not None:
                srv.group.stop(grace_s=0.0)
                srv._mark(
                    f"start-up ended ({type(exc).__name__} while the servers started together): "
                    "the server's process group was killed"
                )
        raise
