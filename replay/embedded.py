"""What a replay run needs of each embedded engine, behind one interface, so that
the run itself (``experiment.py``) and its manifest (``manifest.py``) name no
engine: which model file or folder its servers serve and where it came from,
how its dtype reads in the manifest, its facts (version, binary, threads), the
server of one arm, whether it writes per-round rows (the capture plugin) and
what the manifest notes about it.

``EMBEDDED`` maps an engine's name (``specdec.engines.ENGINES``) to its class;
``embedded_engines(cfg)`` prepares one per engine the run's arms use. External
servers have none: the run then records what the user declared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from specdec.engines import ENGINE_NAMES, Arm, Engine, LlamaCpp, Vllm
from specdec.engines.llama_cpp import LlamaServer
from specdec.engines.llama_cpp.build import LLAMA_CPP_PYTHON, build_llama_server, cached_llama_server
from specdec.engines.server import ServerProcess
from specdec.engines.vllm import ServerSpec, VllmServer
from specdec.errors import SpecdecError
from specdec.model import GGUF_DIST, find_gguf, prepare_model
from specdec.replay.config import ReplayConfig
from specdec.replay.host import engine_facts
from specdec.replay.passes.lossless import eos_ids_for_gguf, eos_ids_for_model
from specdec.runfolder import capture_dir

#: llama.cpp: context per slot (-c is the slots' total), the same as vLLM's max_model_len
LLAMA_SLOT_CONTEXT = ServerSpec.max_model_len


class EmbeddedEngine(ABC):
    """One engine of a run's embedded servers, prepared from the run's settings."""

    #: the engine's adapter, whose facts the class takes: ``name``; ``label``, the program that
    #: serves in the start-up messages ("starting vLLM for the baseline arm"); ``writes_rounds``,
    #: per-round rows (vLLM's capture plugin; llama.cpp has none)
    adapter_type: ClassVar[type[Engine]]
    name: ClassVar[str]
    label: ClassVar[str]
    writes_rounds: ClassVar[bool]
    #: tokens of context one request may use (prompt and reply): vLLM's max_model_len, a llama.cpp slot's
    context_per_request: ClassVar[int]
    #: what the manifest says of the model when this engine serves it
    model: str
    model_source: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.label, cls.writes_rounds = (
            cls.adapter_type.name,
            cls.adapter_type.label,
            cls.adapter_type.writes_rounds,
        )

    @abstractmethod
    def __init__(self, cfg: ReplayConfig) -> None:
        """Prepare what the engine's servers need (model, binary) for the run ``cfg``."""

    @staticmethod
    @abstractmethod
    def model_error(path: str) -> str | None:
        """Why ``--model path`` cannot be served by this engine (None: it can)."""

    @abstractmethod
    def dtype_text(self) -> str:
        """The manifest's ``dtype`` for this engine's servers."""

    @abstractmethod
    def facts(self) -> dict[str, Any]:
        """The manifest's ``engine`` facts (name, version, ...)."""

    @abstractmethod
    def server_args(self, arm: Arm) -> list[str]:
        """The settings a server for ``arm`` starts with (the manifest's ``server_args``)."""

    @abstractmethod
    def server(self, arm: Arm, log: Path, run_dir: Path, run_id: str, startup_timeout_s: float) -> ServerProcess:
        """A server for ``arm``, not yet launched (``server.start_all`` launches it)."""

    def eos_ids(self) -> frozenset[int] | None:
        """The model's end-of-sequence token ids, where the passes can look them up."""
        return None

    @staticmethod
    def draft_model(speculation: Mapping[str, Any]) -> str | None:
        """The separate draft model an arm's speculation loads (None: the method has none)."""
        return None

    @staticmethod
    def target_model(cfg: ReplayConfig) -> Path:
        """The target model the engine serves for ``cfg`` (``--model``, else the bundled one)."""
        raise NotImplementedError

    @classmethod
    def notes(cls, cfg: ReplayConfig) -> list[str]:
        """What the manifest's notes say about this engine in this run (external servers too)."""
        return []


class EmbeddedVllm(EmbeddedEngine):
    adapter_type = Vllm
    context_per_request = ServerSpec.max_model_len

    def __init__(self, cfg: ReplayConfig):
        self.model_source = {}
        folder = cfg.model
        if folder is None:
            prepared = prepare_model()
            folder = str(prepared.path)
            self.model_source = prepared.source
        self.model = folder
        self.spec = ServerSpec(
            model=folder,
            dtype=cfg.dtype,
            max_num_seqs=max(cfg.max_num_seqs, max(cfg.levels)),
            prefix_cache=cfg.prefix_cache,
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

    @staticmethod
    def target_model(cfg: ReplayConfig) -> Path:
        return Path(cfg.model) if cfg.model is not None else prepare_model().path

    def dtype_text(self) -> str:
        return self.spec.dtype

    def facts(self) -> dict[str, Any]:
        return engine_facts()

    def server_args(self, arm: Arm) -> list[str]:
        return Vllm(self.spec).server_args(arm, model=self.spec.model)

    def server(self, arm: Arm, log: Path, run_dir: Path, run_id: str, startup_timeout_s: float) -> ServerProcess:
        spec_cfg = None if arm.speculation is None else dict(arm.speculation)
        return VllmServer(self.spec, spec_cfg, capture_dir(run_dir), run_id, log, startup_timeout_s)

    def eos_ids(self) -> frozenset[int] | None:
        return eos_ids_for_model(self.spec.model)

    @classmethod
    def notes(cls, cfg: ReplayConfig) -> list[str]:
        return [
            "--per-request-spec-decode-metrics is part of the speculative setting: vLLM rejects it without speculation."
        ]


class EmbeddedLlamaCpp(EmbeddedEngine):
    adapter_type = LlamaCpp
    context_per_request = LLAMA_SLOT_CONTEXT
    #: why a llama.cpp arm has no per-round rows (the manifest's capture entry)
    NO_PLUGIN = (
        "llama.cpp has no capture plugin: no per-round rows; the per-request draft stats (timings) and "
        "the engine's counters are recorded"
    )

    def __init__(self, cfg: ReplayConfig):
        self.model = str(self.target_model(cfg))
        self.model_source = {
            "package": GGUF_DIST,
            "file": Path(self.model).name,
            "note": "served as shipped, no conversion",
        }
        slots = max(cfg.levels)  # one slot per request in flight; -c is the whole context, shared by the slots
        self.adapter = LlamaCpp(
            build_llama_server().path,
            threads=2,
            context=LLAMA_SLOT_CONTEXT * slots,
            slots=slots,
            prompt_cache=cfg.prefix_cache == "keep",
        )

    @staticmethod
    def model_error(path: str) -> str | None:
        return None if Path(path).is_file() else f"--model {path}: no such GGUF file (llama.cpp serves a .gguf file)"

    @staticmethod
    def draft_model(speculation: Mapping[str, Any]) -> str | None:
        draft = speculation.get("draft_model")
        return str(draft) if draft and speculation.get("type") == "draft-simple" else None

    @staticmethod
    def target_model(cfg: ReplayConfig) -> Path:
        return Path(cfg.model) if cfg.model is not None else find_gguf()

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
    def notes(cls, cfg: ReplayConfig) -> list[str]:
        cache = "off" if cfg.prefix_cache == "reset" else cfg.prefix_cache
        return [
            "llama.cpp: the greedy lossless pass asks llama-server's own /completion for token ids and top-2 "
            "logprobs; the tokens its speculative path emits come without probabilities, so "
            "a divergence is classified by the baseline arm's margin, as for vLLM; prefix cache "
            f"'{cache}' ('off': --no-cache-prompt on its arms, as llama.cpp has no endpoint to empty "
            "the cache between blocks)."
        ]


EMBEDDED: Mapping[str, type[EmbeddedEngine]] = {e.name: e for e in (EmbeddedVllm, EmbeddedLlamaCpp)}


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
        target = EMBEDDED[arm.engine].target_model(cfg)
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
    return {name: EMBEDDED[name](cfg) for name in engine_names(cfg)}
