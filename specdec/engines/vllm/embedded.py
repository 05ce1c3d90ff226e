"""vLLM as a run's embedded engine: the model folder it serves (the bundled SmolLM2, converted
once, or ``--model``), its settings, facts and server for one arm, with the capture plugin on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdec.defaults import STABLE_DTYPE
from specdec.engines.base import Arm, EmbeddedEngine, EmbeddedSettings
from specdec.engines.server import ServerProcess, separate_cores
from specdec.engines.vllm.adapter import ServerSpec, Vllm, installed_facts
from specdec.engines.vllm.server import VllmServer
from specdec.model import eos_ids_for_model, prepare_model
from specdec.runfolder import capture_dir

#: vLLM 0.32 refuses every tool_choice (auto, required, a named function) without a tool-call parser:
#: a compat probe pair gets one (both arms: the only difference between them stays speculation)
PROBE_TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


class EmbeddedVllm(EmbeddedEngine):
    adapter_type = Vllm
    context_per_request = ServerSpec.max_model_len
    probe_dtype = STABLE_DTYPE
    probe_dtype_text = f"vLLM {STABLE_DTYPE}"

    def __init__(self, settings: EmbeddedSettings):
        self.model_source = {}
        folder = settings.model
        if folder is None:
            prepared = prepare_model()
            folder = str(prepared.path)
            self.model_source = prepared.source
        self.model = folder
        self.spec = ServerSpec(
            model=folder,
            dtype=settings.dtype,
            max_num_seqs=max(settings.max_num_seqs, settings.max_in_flight),
            prefix_cache=settings.prefix_cache,
        )

    @staticmethod
    def model_error(path: str) -> str | None:
        return None if Path(path).is_dir() else f"--model {path}: no such model folder"

    @staticmethod
    def draft_model(speculation: Mapping[str, Any]) -> str | None:
        # method draft_model (vLLM infers it when a model is given without a method). EAGLE
        # and MTP heads are not standalone models: an EAGLE-3 head has its own smaller
        # vocabulary mapped onto the target's (d2t), so comparing tokenizers would be wrong.
        model = speculation.get("model")
        return str(model) if model and speculation.get("method") in (None, "draft_model") else None

    def dtype_text(self) -> str:
        return self.spec.dtype

    def facts(self) -> dict[str, Any]:
        return installed_facts()

    def server_args(self, arm: Arm) -> list[str]:
        return Vllm(self.spec).server_args(arm, model=self.spec.model)

    def server(self, arm: Arm, log: Path, run_dir: Path, run_id: str, startup_timeout_s: float) -> ServerProcess:
        spec_cfg = None if arm.speculation is None else dict(arm.speculation)
        return VllmServer(self.spec, spec_cfg, capture_dir(run_dir), run_id, log, startup_timeout_s)

    def eos_ids(self) -> frozenset[int] | None:
        return eos_ids_for_model(self.spec.model)

    @classmethod
    def notes(cls, prefix_cache: str) -> list[str]:
        return [
            "--per-request-spec-decode-metrics is part of the speculative setting: vLLM rejects it without speculation."
        ]

    @classmethod
    def package_facts(cls) -> dict[str, Any]:
        return installed_facts()

    @classmethod
    def probe_servers(
        cls, capture: Path, run_id: str, logs: list[Path], timeout_s: float, speculation: Mapping[str, Any]
    ) -> tuple[list[ServerProcess], list[str | None], str | None]:
        """float32 (so that speculation changes no greedy token), the tool-call parser, the capture
        plugin into ``capture``, and each CPU worker on a core of its own (``separate_cores``: vLLM's
        'auto' would put both on one)."""
        spec = ServerSpec(
            model=str(cls.target_model(None)), dtype=STABLE_DTYPE, prefix_cache="reset", extra_args=PROBE_TOOL_ARGS
        )
        binds = separate_cores(2)
        servers: list[ServerProcess] = [
            VllmServer(spec, c, capture, run_id, log, timeout_s, cpu_bind=core)
            for c, log, core in zip((None, dict(speculation)), logs, binds)
        ]
        return servers, binds, installed_facts().get("version")
