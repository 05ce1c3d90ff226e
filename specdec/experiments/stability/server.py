"""The server under test of ``specdec stability``: an embedded vLLM that
specdec starts, can kill and restart, and whose memory it can read; or an
endpoint given with ``--url``, which must be on this machine (loopback only:
a stability run sends hostile input and kills servers on purpose).
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from specdec.engines.lifecycle import REAP_S, in_thread
from specdec.engines.vllm import VllmServer, speculative_args
from specdec.errors import EngineError, SpecdecError
from specdec.http.urls import Endpoint, parse_endpoint
from specdec.runfolder import capture_dir, server_log


def require_loopback(url: str, option: str = "--url") -> Endpoint:
    """Parse a server URL and refuse any host that is not this machine:
    127.0.0.0/8, ::1 or localhost."""
    ep = parse_endpoint(url, option)
    host = urlsplit(ep.base).hostname or ""
    if not _is_loopback(host):
        raise SpecdecError(
            f"{option} {ep.display!r}: specdec stability only targets a server on this machine "
            f"(127.0.0.0/8, ::1 or localhost), got host {host!r}. It sends malformed requests and "
            "bursts on purpose; run it next to the server instead."
        )
    return ep


def _is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tree_rss_mb(pid: int) -> float | None:
    """Resident memory of a process and all its descendants, MiB (pages
    shared between them are counted once per process); None if it is gone."""
    import psutil  # heavy: psutil, imported only when used

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


class EndpointServer:
    """A server specdec did not start: no memory reading, no kill or restart."""

    restartable = False

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint

    def rss_mb(self) -> float | None:
        return None

    async def kill(self) -> None:  # pragma: no cover - guarded by restartable
        raise SpecdecError("an external endpoint is never killed")

    async def start(self) -> None:  # pragma: no cover - guarded by restartable
        raise SpecdecError("an external endpoint is never restarted")

    def stop(self) -> None:
        pass


class EmbeddedServer:
    """A local vLLM (``specdec.engines.vllm.VllmServer``, owned as
    ``specdec/engines/lifecycle.py`` says) that can be killed with SIGKILL to
    its process group and started again (on a new free port;
    ``endpoint`` follows). Use ``stop()`` at the end."""

    restartable = True

    def __init__(self, spec, run_dir: Path, run_id: str, startup_timeout_s: float):
        self.spec, self.run_dir, self.run_id = spec, Path(run_dir), run_id
        self.startup_timeout_s = startup_timeout_s
        self._srv: VllmServer | None = None
        self.endpoint: Endpoint | None = None
        self.starts = 0

    @property
    def server_args(self) -> list[str]:
        return [*self.spec.common_args(), *speculative_args(None)]

    def start_blocking(self) -> None:
        srv = VllmServer(
            self.spec,
            None,
            capture_dir(self.run_dir),
            self.run_id,
            server_log(self.run_dir, "baseline"),
            self.startup_timeout_s,
        )
        srv.__enter__()  # raises EngineError (and stops the process) if it never gets healthy
        self._srv, self.starts = srv, self.starts + 1
        self.endpoint = parse_endpoint(srv.base_url)

    async def start(self) -> None:
        await in_thread(self.start_blocking)  # cancelling the await stops the start and kills its group

    async def kill(self) -> None:
        await asyncio.to_thread(self._kill_blocking)

    def _kill_blocking(self) -> None:
        """SIGKILL the whole process group at once (no clean shutdown) and any
        descendant that left it (``lifecycle.OwnedGroup.stop`` with no grace)."""
        srv, self._srv = self._srv, None
        if srv is None or srv.group is None:
            return
        proc = srv.group.proc  # what srv.proc is while the group is set
        try:
            srv.group.stop(grace_s=0.0)
            if proc.poll() is None:
                raise EngineError(f"vLLM (pid {proc.pid}) did not die within {REAP_S:g} s of SIGKILL")
        finally:
            srv.__exit__(None, None, None)  # marks and closes the log; the process is already gone

    def rss_mb(self) -> float | None:
        srv = self._srv
        if srv is None or srv.proc is None or srv.proc.poll() is not None:
            return None
        return tree_rss_mb(srv.proc.pid)

    def stop(self) -> None:
        srv, self._srv = self._srv, None
        if srv is not None:
            srv.__exit__(None, None, None)
