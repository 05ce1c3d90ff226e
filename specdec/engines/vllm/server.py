"""vLLM's OpenAI API server for one arm, with the capture plugin on (``VllmServer``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from specdec.defaults import STARTUP_TIMEOUT_S
from specdec.engines.base import Arm
from specdec.engines.server import ServerProcess, free_port
from specdec.engines.vllm.adapter import ServerSpec, Vllm
from specdec.runfolder import ENV_CAPTURE_DIR, ENV_CAPTURE_RUN_ID

#: the longest path a Unix socket takes (sun_path: 108 bytes with the closing NUL), and the length
#: of the names vLLM gives its sockets (a uuid4 in VLLM_RPC_BASE_PATH)
_SOCKET_PATH_MAX = 107
_SOCKET_NAME_LEN = 36


class VllmServer(ServerProcess):
    """A vLLM API server subprocess with the capture plugin on."""

    label = "vLLM server"
    stop_note = (
        " vLLM's shutdown messages below ('force killing', 'leaked', resource_tracker warnings) "
        "are its normal exit, not failures"
    )

    def __init__(
        self,
        spec: ServerSpec,
        spec_config: dict[str, Any] | None,
        capture_dir: Path,
        run_id: str,
        log_path: Path,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        cpu_bind: str | None = None,
    ):
        """``cpu_bind``: vLLM's VLLM_CPU_OMP_THREADS_BIND for this server (its CPU worker's cores, or
        'nobind'); None: vLLM's 'auto' (one core per NUMA node, the last left to the API server)."""
        port = free_port()
        self.capture_dir, self.run_id = capture_dir, run_id
        env = {
            ENV_CAPTURE_DIR: str(capture_dir),
            ENV_CAPTURE_RUN_ID: run_id,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            "PYTHONUNBUFFERED": "1",
            **spec.env(),
            **({"VLLM_CPU_OMP_THREADS_BIND": cpu_bind} if cpu_bind is not None else {}),
        }
        engine = Vllm(spec)
        cmd = engine.server_command(
            Arm("speculative" if spec_config else "baseline", spec_config), model=spec.model, port=port
        )
        super().__init__(cmd, env, log_path, port, engine.health_path, startup_timeout_s)
        self._ipc_dir: str | None = None

    def launch(self) -> None:
        """As ``ServerProcess.launch``, with vLLM's ZeroMQ sockets (``VLLM_RPC_BASE_PATH``: the API
        server's and engine core's ``ipc://`` paths, by default in the temporary folder itself) in a
        folder of this server's own, removed once the server has stopped: a stopped or killed vLLM
        leaves its socket files behind (28 in /tmp after one ``make test``, 2026-12-07). A
        ``VLLM_RPC_BASE_PATH`` set by the user is kept."""
        if "VLLM_RPC_BASE_PATH" not in os.environ and self._ipc_dir is None:
            folder = tempfile.mkdtemp(prefix="specdec-ipc-")
            if len(os.fsencode(folder)) + 1 + _SOCKET_NAME_LEN <= _SOCKET_PATH_MAX:
                self._ipc_dir = folder
                self.extra_env["VLLM_RPC_BASE_PATH"] = folder
            else:  # a long temporary folder: vLLM's own place, where its socket paths still fit
                os.rmdir(folder)
        super().launch()

    def _close(self) -> None:
        # after the stop (its whole process group waited for) or a failed start (the group killed)
        super()._close()
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)
            self._ipc_dir = None
            self.extra_env.pop("VLLM_RPC_BASE_PATH", None)
