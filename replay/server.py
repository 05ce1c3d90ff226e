"""Start and stop a local engine server for one arm: vLLM's OpenAI server (the
embedded default, ``LocalServer``) or llama.cpp's ``llama-server``
(``LlamaServer``), both on the shared ``ServerProcess``.

Both arms get the same argument list; only the speculative settings differ
(``--speculative-config`` and ``--per-request-spec-decode-metrics``, which
vLLM accepts only with speculation). The capture plugin is switched on through
the server's environment.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import EngineError
from specdec.runfolder import ENV_CAPTURE_DIR, ENV_CAPTURE_RUN_ID


@dataclass(frozen=True)
class ServerSpec:
    model: str
    dtype: str = "float32"
    max_model_len: int = 2048
    max_num_seqs: int = 32
    kv_cache_gib: int = 2
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    prefix_cache: str = "reset"  # ReplayConfig.prefix_cache: reset | off | keep

    def common_args(self) -> list[str]:
        return [
            "--model", self.model,
            "--served-model-name", "specdec-target",
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--seed", str(self.seed),
            "--enforce-eager",
            *(["--no-enable-prefix-caching"] if self.prefix_cache == "off" else []),
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        """Server environment: dev mode serves POST /reset_prefix_cache (loopback only)."""
        return {"VLLM_SERVER_DEV_MODE": "1"} if self.prefix_cache == "reset" else {}


def speculative_args(spec_config: dict | None) -> list[str]:
    if spec_config is None:
        return []
    return [
        "--speculative-config", json.dumps(spec_config, sort_keys=True),
        "--per-request-spec-decode-metrics", "summary",
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """Context manager: an engine's server subprocess in a session of its own, logged to
    ``log_path``, healthy when ``GET health_path`` answers 200. The engine-specific part
    is the command and environment (``LocalServer`` for vLLM, ``LlamaServer``)."""

    label = "server"
    #: what the marker line before a deliberate stop adds about the engine's own shutdown messages
    stop_note = ""

    def __init__(self, cmd: list[str], extra_env: dict[str, str], log_path: Path, port: int,
                 health_path: str = "/health", startup_timeout_s: float = 300.0):
        self.cmd, self.extra_env, self.log_path, self.port = cmd, extra_env, log_path, port
        self.health_path, self.startup_timeout_s = health_path, startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        env = dict(os.environ)
        env.update(self.extra_env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            self._log.close()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(
                    f"{self.label} exited with code {self.proc.returncode} during start-up; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}{self.health_path}", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise EngineError(
            f"{self.label} not healthy after {self.startup_timeout_s:.0f}s; see {self.log_path}:\n{self.log_tail()}"
        )

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

    def stop(self) -> None:
        """SIGINT first (lets the engine flush the capture buffers), then escalate.

        vLLM's normal shutdown logs warnings that read like failures (the API
        server "force killing" EngineCore and its worker, nanobind "leaked"
        lists from triton, resource_tracker "leaked semaphore/shared_memory").
        A marker line before and after says the stop was specdec's and how the
        process ended, so a reader can tell them from a real crash."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self._mark(f"the server had already exited with code {self.proc.returncode} before specdec stopped it")
            return
        self._mark(f"stopping the server on purpose (SIGINT).{self.stop_note}")
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader (vLLM's API server) can exit before its engine core, which writes its
        # last capture part on shutdown: wait for the rest of the process group, so that the
        # run folder's part files are consolidated only after the last one is written.
        left = _wait_group(self.proc.pid, timeout_s=15.0)
        if left:
            self._mark(f"{left} process(es) of the server's group still running after 15 s: killed")
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._mark(f"server stopped (exit code {self.proc.returncode})")

    def __exit__(self, *exc) -> None:
        self.stop()
        self._log.close()


class LocalServer(ServerProcess):
    """A vLLM API server subprocess with the capture plugin on."""

    label = "vLLM server"
    stop_note = (" vLLM's shutdown messages below ('force killing', 'leaked', resource_tracker warnings) "
                 "are its normal exit, not failures")

    def __init__(self, spec: ServerSpec, spec_config: dict | None, capture_dir: Path,
                 run_id: str, log_path: Path, startup_timeout_s: float = 300.0):
        port = free_port()
        self.capture_dir, self.run_id = capture_dir, run_id
        env = {
            ENV_CAPTURE_DIR: str(capture_dir),
            ENV_CAPTURE_RUN_ID: run_id,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            "PYTHONUNBUFFERED": "1",
            **spec.env(),
        }
        from specdec.replay.engines import Arm, Vllm

        engine = Vllm(spec)
        cmd = engine.server_command(Arm("speculative" if spec_config else "baseline", spec_config),
                                    model=spec.model, port=port)
        super().__init__(cmd, env, log_path, port, engine.health_path, startup_timeout_s)


class LlamaServer(ServerProcess):
    """A llama.cpp ``llama-server`` subprocess for one arm (``replay/engines/llama_cpp.py``
    builds the command; the binary is built once and cached by ``llama_build.py``)."""

    label = "llama-server"

    def __init__(self, arm, model: Path, log_path: Path, engine=None, startup_timeout_s: float = 120.0):
        from specdec.replay.engines import LlamaCpp

        self.engine = engine or LlamaCpp()
        port = free_port()
        cmd = self.engine.server_command(arm, model=str(model), port=port)
        super().__init__(cmd, self.engine.server_env(arm), log_path, port, self.engine.health_path,
                         startup_timeout_s)


def _group_members(pgid: int) -> int:
    """Live (not zombie) processes of process group ``pgid`` (psutil, as
    ``resources.process_tree_rss``; the group, not the tree, since the leader's
    children are re-parented once it has exited)."""
    import psutil

    n = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                n += 1
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # ended between the listing and the look
    return n


def _wait_group(pgid: int, timeout_s: float) -> int:
    """Wait until process group ``pgid`` has no live process; return how many are left."""
    deadline = time.monotonic() + timeout_s
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left
