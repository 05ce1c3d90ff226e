"""Engine adapters: what specdec needs to know of each serving engine, in one place.

An adapter says, for one engine:

- how to start a server for an arm (``executable``, ``server_args``, composed
  by ``server_command``; ``server_env``) and where its health probe is
  (``health_path``);
- how to read the per-request speculative stats out of a response
  (``request_stats``: a chunk of the stream, or a plain JSON reply), and what
  a missing figure means once the request is over (``settle_stats``);
- which Prometheus counters hold its speculative totals (``counters``: specdec's
  key -> the engine's metric name), including a per-position counter where the
  engine has one (``position_counter``).

Both engines honour ``ignore_eos`` with ``max_tokens``, which
``client.build_payload`` sends to every server: the fixed output length needs
no per-engine field. Only vLLM writes per-round rows (the capture plugin); a
run without them says so (``manifest.capture``), whatever its engine.

``ENGINES`` maps each engine's name to its adapter. The client does not need
to be told which engine it talks to: ``request_stats_of`` asks every adapter,
and the shape of a response says whose it is (vLLM's
``metrics.speculative_decoding``, llama.cpp's ``timings``).

The replay starts either engine's servers: for the classic pair (``--engine``),
or per named arm, each with its own engine (``--arm``, ``specdec/arms.py``), so
one run can hold both (see ``docs/engines.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from specdec.engines.base import Arm, EmbeddedEngine, EmbeddedSettings, Engine, RequestStats
from specdec.engines.llama_cpp import LlamaCpp
from specdec.engines.llama_cpp.embedded import EmbeddedLlamaCpp
from specdec.engines.vllm import Vllm
from specdec.engines.vllm.embedded import EmbeddedVllm

__all__ = [
    "ENGINES",
    "ENGINE_NAMES",
    "DEFAULT_ENGINE",
    "EMBEDDED",
    "Arm",
    "EmbeddedEngine",
    "EmbeddedSettings",
    "Engine",
    "EngineName",
    "LlamaCpp",
    "RequestStats",
    "Vllm",
    "engine",
    "request_stats_of",
]

ENGINES: Mapping[str, Engine] = {e.name: e for e in (Vllm(), LlamaCpp())}
#: the engines' names, the default (vLLM) first: what --engine and an arm's ENGINE accept
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
#: the same names as a type, for the configs' fields (a test checks it against ENGINE_NAMES)
EngineName = Literal["vllm", "llama.cpp"]
#: each engine's class as a run's embedded engine (model, settings, facts, the server of one arm), by name
EMBEDDED: Mapping[str, type[EmbeddedEngine]] = {e.name: e for e in (EmbeddedVllm, EmbeddedLlamaCpp)}
#: the engine a run starts when none is named
DEFAULT_ENGINE: EngineName = "vllm"


def engine(name: str) -> Engine:
    """The adapter named ``name`` ('vllm' or 'llama.cpp'); a clear error for any other."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}: one of {', '.join(sorted(ENGINES))}") from None


def request_stats_of(chunk: dict[str, Any]) -> RequestStats | None:
    """The per-request speculative stats in a response chunk, whichever engine sent it."""
    for e in ENGINES.values():
        stats = e.request_stats(chunk)
        if stats is not None:
            return stats
    return None
