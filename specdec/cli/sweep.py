"""``specdec-replay --sweep-k 0,2,4,8``: one run that captures every k, as named arms.

Arm ``k0`` is the engine without speculation; arm ``k<N>`` is the same speculation with N draft
tokens (vLLM: ``num_speculative_tokens``; llama.cpp: ``n_max``, with ``n_min`` 0), measured
against ``k0``. The speculation swept is ``--spec-config`` when given, else the engine's ngram
(``Engine.ngram``: vLLM's ngram proposer, llama.cpp's ngram-mod); a draft model is swept
by giving its settings there. The run's analysis runs are ``<run_id>/k<N>``, one per k > 0;
``specdec plan`` takes the largest k's rounds for acceptance and every arm's steps for the step
cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specdec.arms import ArmSpec
from specdec.engines import ENGINES

__all__ = ["sweep_arms"]


def sweep_arms(engine: str, ks: Sequence[int], speculation: Mapping[str, Any] | None = None) -> list[ArmSpec]:
    """``k0`` then one arm per k > 0 of ``ks`` (sorted, each once); the engine's adapter says
    where a draft length goes (``Engine.with_draft_length``)."""
    if engine not in ENGINES:
        raise ValueError(f"--sweep-k: unknown engine {engine!r} (one of {', '.join(ENGINES)})")
    adapter = ENGINES[engine]
    levels = sorted({int(k) for k in ks})
    if any(k < 0 for k in levels) or not any(k > 0 for k in levels):
        raise ValueError("--sweep-k needs whole numbers >= 0 with at least one above 0")
    base = dict(speculation) if speculation is not None else dict(adapter.ngram)
    arms = [ArmSpec("k0", engine, None)]
    arms += [ArmSpec(f"k{k}", engine, adapter.with_draft_length(base, k), reference="k0") for k in levels if k > 0]
    return arms
