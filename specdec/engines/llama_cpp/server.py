"""llama.cpp's ``llama-server`` for one arm (``LlamaServer``)."""

from __future__ import annotations

from pathlib import Path

from specdec.engines.base import Arm
from specdec.engines.llama_cpp.adapter import LlamaCpp
from specdec.engines.server import ServerProcess, free_port


class LlamaServer(ServerProcess):
    """A llama.cpp ``llama-server`` subprocess for one arm (``specdec/engines/llama_cpp/adapter.py``
    builds the command; the binary is built once and cached by ``build.py``)."""

    label = "llama-server"

    def __init__(
        self, arm: Arm, model: Path, log_path: Path, engine: LlamaCpp | None = None, startup_timeout_s: float = 120.0
    ) -> None:
        self.engine = engine or LlamaCpp()
        port = free_port()
        cmd = self.engine.server_command(arm, model=str(model), port=port)
        super().__init__(cmd, self.engine.server_env(arm), log_path, port, self.engine.health_path, startup_timeout_s)
