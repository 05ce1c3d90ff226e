"""Whoever starts a server owns it: the one way specdec starts, waits for and
stops an engine's server process (vLLM's API server with its EngineCore
child, llama.cpp's ``llama-server``, the fakes of the tests).

- **Own process group.** ``spawn`` starts the server with
  ``start_new_session=True``: the server and everything it forks (vLLM's
  EngineCore and workers) share one process group whose id is the server's
  pid, so one ``killpg`` reaches them all, and the terminal's Ctrl-C goes to
  specdec only (specdec then decides how the servers stop).
- **Signals become an interrupt.** While a server is owned, SIGTERM and SIGHUP
  do what Ctrl-C does at that moment (``interrupt_on_signals``): inside the
  replay's event loop asyncio cancels the run; elsewhere a KeyboardInterrupt
  is raised in the main thread. Either way the ``finally`` and ``__exit__``
  blocks that stop the servers run. (Their default action would end specdec
  at once and leave the servers behind.)
- **Interruptible start-up.** ``OwnedGroup.wait_ready`` polls the health probe
  every 0.2 s (each probe at most 1 s); Ctrl-C, SIGTERM or SIGHUP in the main
  thread, or the cancellation of ``in_thread`` for a start in a worker thread,
  ends the wait, and a server that never became ready is SIGKILLed with its
  whole group at once (nothing of a half-started engine is worth a grace
  period, and vLLM ignores SIGTERM during parts of its start-up).
- **Stop: SIGTERM, then SIGKILL.** ``OwnedGroup.stop`` sends SIGTERM to the
  group, waits until no process of the group is left, at most ``GRACE_S``
  (10 s; a served vLLM CPU stops in about 1 s, as the stop markers of this
  machine's server logs show, llama-server at once), then SIGKILLs the group
  and any descendant that left it, and waits up to ``REAP_S`` for them to go.
  vLLM treats SIGTERM as SIGINT (both start its clean shutdown, which writes
  the capture plugin's last part file). A second signal during a stop skips
  the rest of the grace period (SIGKILL now) instead of abandoning the stop
  half-way; it is delivered again once the stop is over when the stop was a
  normal one (not itself part of an interrupt).
- **Last resort: PDEATHSIG.** A SIGKILL of specdec itself is seen by no
  handler. On Linux the server is started with ``prctl(PR_SET_PDEATHSIG,
  SIGTERM)``, so the kernel sends it SIGTERM when specdec dies. That reaches
  the direct child only, not the rest of its group (vLLM's API server then
  stops its own EngineCore, which also watches its parent); the group kill
  above is what covers every other exit. PDEATHSIG fires when the *thread*
  that forked the child ends, not the process. So a start from a worker
  thread (a restart inside the replay's event loop, a test fixture's thread)
  is not forked by that short-lived thread: ``spawn`` hands the fork to one
  spawner thread that lives as long as the process (``_SPAWNER``), and its
  servers too get SIGTERM when the process dies, by SIGKILL or by a signal's
  default action in a program that installed no handler (pytest under
  SIGTERM). Before this, such servers outlived their owner.

``specdec capture serve`` is not a start path: it *becomes* vLLM (``os.execv``),
so there is no parent to own it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any, TypeVar

from specdec.errors import EngineError

T = TypeVar("T")

#: Seconds between SIGTERM to a served server's group and SIGKILL to it.
GRACE_S = 10.0
#: Seconds to wait for the group to be gone after SIGKILL.
REAP_S = 5.0
#: Seconds between two health probes during start-up (and the probe's timeout, x5).
POLL_S = 0.2
#: The signals that stop specdec: Ctrl-C, a supervisor's kill, a closed terminal or tmux pane.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_PR_SET_PDEATHSIG = 1
#: Set by ``in_thread`` for the worker thread it runs: set() when the await is cancelled.
_CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("server_start_cancel", default=None)


class StartCancelled(EngineError):
    """A server's start-up was cancelled (the run was interrupted); its group is killed."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# --- signals --------------------------------------------------------------------------------------


def _as_ctrl_c(on_signal: Callable[[int], None] | None) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        if on_signal is not None:
            on_signal(signum)
        on_int = signal.getsignal(signal.SIGINT)
        if callable(on_int) and getattr(on_int, "_specdec_as_ctrl_c", False) is False:
            on_int(signal.SIGINT, frame)  # asyncio's: cancel the run once; Python's: KeyboardInterrupt
        else:  # Ctrl-C ignored or left to the OS: still stop
            raise KeyboardInterrupt

    handler._specdec_as_ctrl_c = True  # type: ignore[attr-defined]
    return handler


@contextlib.contextmanager
def interrupt_on_signals(on_signal: Callable[[int], None] | None = None, *, replace: bool = True) -> Iterator[None]:
    """Within the block (main thread only; elsewhere nothing changes), SIGTERM
    and SIGHUP do what Ctrl-C does now. ``on_signal(signum)`` is called first
    (the replay notes the signal for its exit status). ``replace=False`` only
    takes the signals whose action is the default (termination), leaving a
    handler someone else installed, or an ignored SIGHUP (``nohup``), as it is."""
    if not _in_main_thread():
        yield
        return
    handler, previous = _as_ctrl_c(on_signal), {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if replace or signal.getsignal(sig) == signal.SIG_DFL:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        if _in_main_thread():  # a server stopped from a worker thread leaves them (harmless: they act as Ctrl-C)
            for sig, old in previous.items():
                if signal.getsignal(sig) is handler:
                    signal.signal(sig, old)


@contextlib.contextmanager
def _deferred_signals(hurry: threading.Event, redeliver: bool) -> Iterator[None]:
    """During a stop (main thread only): a stop signal sets ``hurry`` instead of
    raising; the first one is sent again after the block when ``redeliver``."""
    if not _in_main_thread():
        yield
        return
    got: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        hurry.set()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if got and redeliver:
            os.kill(os.getpid(), got[0])  # now to the handler that was there before the stop


# --- start ---------------------------------------------------------------------------------------


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _child_setup(parent: int, blocked: set[int], pdeathsig: bool) -> Callable[[], None]:
    """Runs in the child between fork and exec: unblock the signals the parent
    blocked across the fork, ask for SIGTERM on the parent's death, and stop at
    once if the parent is already gone."""
    prctl = _PRCTL

    def setup() -> None:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        if pdeathsig and prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(1)

    return setup


class _Spawner:
    """One daemon thread that forks the servers started from worker threads and
    lives until the process ends, so their PDEATHSIG (tied to the forking
    thread) fires only when the process itself dies (module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict[str, Any], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], T]) -> T:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="specdec-server-spawner", daemon=True)
                self._thread.start()
        box: dict[str, Any] = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()  # a fork and an exec: milliseconds
        if "error" in box:
            raise box["error"]
        result: T = box["value"]
        return result

    def _serve(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed back to the caller's thread
                box["error"] = exc
            finally:
                done.set()


_SPAWNER = _Spawner()


def spawn(cmd: list[str], env: dict[str, str], stdout: IO[bytes] | int | None) -> OwnedGroup:
    """Start ``cmd`` in a session (process group) of its own, stderr with stdout,
    with PDEATHSIG (module docstring). From the main thread the stop signals are
    blocked across the fork, so the ``OwnedGroup`` exists before an interrupt can
    be raised (no unowned window); from any other thread the fork is made by the
    process-long spawner thread."""
    if not _in_main_thread():
        return _SPAWNER.call(lambda: _spawn(cmd, env, stdout, main=False))
    return _spawn(cmd, env, stdout, main=True)


def _spawn(cmd: list[str], env: dict[str, str], stdout: IO[bytes] | int | None, *, main: bool) -> OwnedGroup:
    blocked: set[int] = set(STOP_SIGNALS) if main else set()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked) if blocked else None
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_child_setup(os.getpid(), blocked, True),
        )
        group = OwnedGroup(proc)
    finally:
        if old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a pending signal is handled here
    return group


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread`` for a call that starts servers: cancelling the await
    (Ctrl-C in the event loop) ends the start-up wait in the thread, which kills
    the group it was starting, and waits for the thread to finish before the
    cancellation goes on, so no server is started behind the run's back."""
    cancel = threading.Event()
    token = _CANCEL.set(cancel)
    try:
        fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))  # the task and the thread copy the context
    finally:
        _CANCEL.reset(token)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        cancel.set()
        while not fut.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait({fut})
        if not fut.cancelled():
            fut.exception()  # retrieved: a StartCancelled of the thread is expected here
        raise


# --- the group -----------------------------------------------------------------------------------


@dataclass
class StopOutcome:
    how: str  # "already exited" | "exited on SIGTERM" | "killed (SIGKILL)"
    left: int  # processes of the group still alive after the last wait (0 unless the kernel is slow)
    seconds: float


class OwnedGroup:
    """A started server process and its process group (pgid = its pid)."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc, self.pgid = proc, proc.pid

    def wait_ready(
        self,
        probe: Callable[[float], bool],
        timeout_s: float,
        *,
        on_exit: Callable[[int], str],
        on_timeout: Callable[[], str],
    ) -> None:
        """Poll ``probe(timeout_s)`` until it is true. The server exiting first,
        the time running out, an interrupt or a cancelled ``in_thread`` end the
        wait by an exception, after the whole group is SIGKILLed."""
        cancel = _CANCEL.get()
        deadline = time.monotonic() + timeout_s
        try:
            with interrupt_on_signals(replace=False):
                while True:
                    if cancel is not None and cancel.is_set():
                        raise StartCancelled("server start-up cancelled")
                    if self.proc.poll() is not None:
                        raise EngineError(on_exit(self.proc.returncode))
                    if probe(5 * POLL_S):
                        return
                    if time.monotonic() >= deadline:
                        raise EngineError(on_timeout())
                    if cancel is not None:
                        cancel.wait(POLL_S)
                    else:
                        time.sleep(POLL_S)
        except BaseException:
            self.stop(grace_s=0.0)
            raise

    def members(self) -> int:
        return group_members(self.pgid)

    def stop(self, grace_s: float = GRACE_S, *, redeliver: bool = True) -> StopOutcome:
        """SIGTERM to the group, SIGKILL after ``grace_s`` (0: at once), then wait
        for the group to be gone (module docstring). Safe to call twice."""
        started = time.monotonic()
        hurry = threading.Event()
        with _deferred_signals(hurry, redeliver):
            if self.proc.poll() is not None and not self.members():
                return StopOutcome("already exited", 0, 0.0)
            strays = _descendants(self.proc.pid)
            how = "exited on SIGTERM"
            if grace_s > 0:
                _killpg(self.pgid, signal.SIGTERM)
                deadline = started + grace_s
                while (self.proc.poll() is None or self.members()) and time.monotonic() < deadline:
                    if hurry.wait(0.05):
                        break
            if self.proc.poll() is None or self.members() or any(_alive(p) for p in strays):
                how = "killed (SIGKILL)"
                _killpg(self.pgid, signal.SIGKILL)
                for p in strays:  # a descendant that left the group
                    with contextlib.suppress(Exception):
                        p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=REAP_S)
            left = wait_group(self.pgid, REAP_S)
        return StopOutcome(how, left, time.monotonic() - started)


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _descendants(pid: int) -> list[Any]:  # psutil.Process objects
    import psutil  # only when stopping: psutil is not needed to start

    try:
        children: list[Any] = psutil.Process(pid).children(recursive=True)
        return children
    except psutil.Error:
        return []


def _alive(proc: Any) -> bool:  # a psutil.Process
    import psutil  # only when stopping (as _descendants)

    try:
        return bool(proc.is_running() and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD))
    except psutil.Error:
        return False


def group_members(pgid: int) -> int:
    """Live (not zombie) processes of process group ``pgid`` (the group, not the
    tree: the leader's children are re-parented once it has exited)."""
    import psutil  # only when stopping (as _descendants)

    n = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                n += 1
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # ended between the listing and the look
    return n


def wait_group(pgid: int, timeout_s: float) -> int:
    """Wait until process group ``pgid`` has no live process; return how many are left."""
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
