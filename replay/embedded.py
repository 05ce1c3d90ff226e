"""What a replay run needs of its embedded engines, read from its config: each engine's own
class (model, settings, facts, the server of one arm) is in the engine's package
(``specdec/engines/vllm/embedded.py``, ``specdec/engines/llama_cpp/embedded.py``), behind
``specdec.engines.EmbeddedEngine``, so that the run (``experiment.py``) and its manifest
(``manifest.py``) name no engine. Here: whether ``--model`` fits the run's engines, the
draft's tokenizer preflight, the context a request may use, and one prepared engine per
engine the run's arms use (``embedded_engines``). External servers have none: the run then
records what the user declared.
"""

from __future__ import annotations

from pathlib import Path

from specdec.engines import EMBEDDED, ENGINE_NAMES, EmbeddedEngine, EmbeddedSettings
from specdec.errors import SpecdecError
from specdec.replay.config import ReplayConfig


def model_error(cfg: ReplayConfig) -> str | None:
    """Why ``--model`` does not fit the run's embedded engines (None: it does, or none was given)."""
    if cfg.external or cfg.model is None:
        return None
    engines = set(cfg.arm_engines().values())
    if len(engines) > 1:
        return (
            f"--model {cfg.model}: the arms run {' and '.join(sorted(engines))}, which serve "
            "different files (a model folder, a GGUF); leave --model out to serve the prepared SmolLM2 on each"
        )
    return EMBEDDED[next(iter(engines))].model_error(cfg.model)


def draft_preflight(cfg: ReplayConfig) -> list[str]:
    """The tokenizer preflight (``specdec/vocab.py``) of every embedded arm that
    speculates with a separate draft model, against the model its engine serves; run
    before any folder is created, server started or request sent. Returns one manifest
    note per arm checked; raises ``VocabMismatch`` naming every difference. External
    servers: nothing (their models are not known here)."""
    if cfg.external:
        return []
    from specdec.vocab import preflight  # heavy: tokenizers / gguf, only for a draft model

    notes = []
    for arm in cfg.arm_specs():
        draft = EMBEDDED[arm.engine].draft_model(arm.speculation) if arm.speculation else None
        if draft is None:
            continue
        target = EMBEDDED[arm.engine].target_model(cfg.model)
        try:
            report = preflight(Path(draft), target)
        except SpecdecError as exc:
            raise type(exc)(f"arm {arm.name!r}: {exc}") from None
        notes.append(
            f"Tokenizer preflight, arm {arm.name}: the draft {draft} and the target {target} agree "
            f"({report.target_vocab_size} tokens; no difference found)."
        )
    return notes


def context_per_request(cfg: ReplayConfig) -> int | None:
    """The context a request may use on every engine of the run (None: external servers, whose
    limit is not known here)."""
    if cfg.external:
        return None
    return min(EMBEDDED[name].context_per_request for name in engine_names(cfg))


def engine_names(cfg: ReplayConfig) -> list[str]:
    """The engines the run's arms use, vLLM first (the order of the manifest's facts and notes)."""
    return sorted(set(cfg.arm_engines().values()), key=ENGINE_NAMES.index)


def embedded_engines(cfg: ReplayConfig) -> dict[str, EmbeddedEngine]:
    """One prepared engine per engine the run's arms use (none for external servers), by name."""
    if cfg.external:
        return {}
    settings = embedded_settings(cfg)
    return {name: EMBEDDED[name](settings) for name in engine_names(cfg)}


def embedded_settings(cfg: ReplayConfig) -> EmbeddedSettings:
    """What the run's embedded engines take of its settings."""
    return EmbeddedSettings(
        model=cfg.model,
        dtype=cfg.dtype,
        max_num_seqs=cfg.max_num_seqs,
        max_in_flight=max(cfg.levels),
        prefix_cache=cfg.prefix_cache,
    )
