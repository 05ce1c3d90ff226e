"""llama.cpp as a run's embedded engine: the GGUF it serves (the bundled SmolLM2 as shipped, or
``--model``), the ``llama-server`` built here, its facts and server for one arm (no capture
plugin: the per-request timings and the counters are what it records)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdec.engines.base import Arm, EmbeddedEngine, EmbeddedSettings
from specdec.engines.llama_cpp import build
from specdec.engines.llama_cpp.adapter import LlamaCpp
from specdec.engines.llama_cpp.build import LLAMA_CPP_PYTHON, cached_llama_server
from specdec.engines.llama_cpp.server import LlamaServer
from specdec.engines.server import ServerProcess
from specdec.engines.vllm.adapter import ServerSpec
from specdec.model import GGUF_DIST, eos_ids_for_gguf

#: context per slot (-c is the slots' total), the same as vLLM's max_model_len
LLAMA_SLOT_CONTEXT = ServerSpec.max_model_len
#: Threads of one compat probe llama-server (the feature pair and the quantization cells alike). One, not two:
#: on a host whose cores other processes share, two threads wait for each other at every step of the
#: graph and a step stalls whenever either is descheduled. Seen with -t 2 on this project's 2-core host:
#: the F16 target at 2,980-3,010 ms per token at load 12-13 where the same server had done 17 ms per
#: token earlier in that run; the feature pair at 300-970 ms per token at load 3-7 (2026-12-03), its 86
#: requests of one repeat in 267 s at -t 2 and 113 s at -t 1 (load 1-4). Both arms use the same count,
#: so each ratio is like for like.
PROBE_THREADS = 1
#: Threads of a run's llama-server (``-t``): the two cores of the project's reference host. The engine
#: tests serve with one (tests/conftest.py), as the tests without engine run beside them.
SERVE_THREADS = 2


class EmbeddedLlamaCpp(EmbeddedEngine):
    adapter_type = LlamaCpp
    context_per_request = LLAMA_SLOT_CONTEXT
    probe_dtype_text = "llama.cpp GGUF as shipped"
    no_rounds_reason = (
        "llama.cpp has no capture plugin: no per-round rows; the per-request draft stats (timings) and "
        "the engine's counters are recorded"
    )

    def __init__(self, settings: EmbeddedSettings):
        self.model = str(self.target_model(settings.model))
        self.model_source = {
            "package": GGUF_DIST,
            "file": Path(self.model).name,
            "note": "served as shipped, no conversion",
        }
        slots = settings.max_in_flight  # one slot per request in flight; -c is the whole context, shared by the slots
        self.adapter = LlamaCpp(
            build.build_llama_server().path,  # looked up when called (tests put a stub server here)
            threads=SERVE_THREADS,
            context=LLAMA_SLOT_CONTEXT * slots,
            slots=slots,
            prompt_cache=settings.prefix_cache == "keep",
        )

    @staticmethod
    def model_error(path: str) -> str | None:
        return None if Path(path).is_file() else f"--model {path}: no such GGUF file (llama.cpp serves a .gguf file)"

    @staticmethod
    def draft_model(speculation: Mapping[str, Any]) -> str | None:
        draft = speculation.get("draft_model")
        return str(draft) if draft and speculation.get("type") == "draft-simple" else None

    def dtype_text(self) -> str:
        return f"GGUF as shipped ({Path(self.model).name})"

    def eos_ids(self) -> frozenset[int] | None:
        return eos_ids_for_gguf(self.model)

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist (llama.cpp 0c1e570)",
            "binary": str(self.adapter.binary or cached_llama_server()),
            "threads": self.adapter.threads,
            "slots": self.adapter.slots,
            "context": self.adapter.context,
        }

    def server_args(self, arm: Arm) -> list[str]:
        return self.adapter.server_args(arm, model=self.model)

    def server(self, arm: Arm, log: Path, run_dir: Path, run_id: str, startup_timeout_s: float) -> ServerProcess:
        return LlamaServer(arm, Path(self.model), log, self.adapter, startup_timeout_s)

    @classmethod
    def notes(cls, prefix_cache: str) -> list[str]:
        cache = "off" if prefix_cache == "reset" else prefix_cache
        return [
            "llama.cpp: the greedy lossless pass asks llama-server's own /completion for token ids and top-2 "
            "logprobs; the tokens its speculative path emits come without probabilities, so "
            "a divergence is classified by the baseline arm's margin, as for vLLM; prefix cache "
            f"'{cache}' ('off': --no-cache-prompt on its arms, as llama.cpp has no endpoint to empty "
            "the cache between blocks)."
        ]

    @classmethod
    def probe_servers(
        cls, capture: Path, run_id: str, logs: list[Path], timeout_s: float, speculation: Mapping[str, Any]
    ) -> tuple[list[ServerProcess], list[str | None], str | None]:
        """The shipped GGUF, one slot and ``PROBE_THREADS`` threads each (no capture plugin)."""
        adapter = LlamaCpp(threads=PROBE_THREADS, context=2048, slots=1)
        arms = (Arm("baseline", None), Arm("speculative", speculation))
        servers: list[ServerProcess] = [
            LlamaServer(a, cls.target_model(None), log, adapter, timeout_s) for a, log in zip(arms, logs)
        ]
        return servers, [None, None], f"llama-cpp-python {LLAMA_CPP_PYTHON}"
