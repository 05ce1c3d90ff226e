"""The engine adapter interface (``specdec/engines/__init__.py`` says what each part is for)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from specdec.engines.metrics import parse_counters
from specdec.model import bundled_model

if TYPE_CHECKING:  # the servers' module imports nothing of this one: only for the type
    from specdec.engines.server import ServerProcess


@dataclass(frozen=True)
class RequestStats:
    """One request's speculative totals as its engine reported them in the response.
    ``steps`` is None where the engine does not say (llama.cpp)."""

    engine: str
    draft_tokens: int
    accepted_tokens: int
    steps: int | None = None


@dataclass(frozen=True)
class Deployment:
    """A planned speculative setting in one engine's own form (``Engine.deployment``): what to
    add to the speculative pool's server command (``command``: '' when the plan turns
    speculation off), the engine's own settings behind it (``settings``, JSON), a file that
    holds them (``file_name``, ``file_text``), and what the reader should know (``note``).
    ``schedule`` is the k per batch-size range, ``[[start, end, k], ...]``, where the engine
    takes one; None where a server runs one k."""

    engine: str
    label: str
    command: str
    settings: dict[str, Any]
    file_name: str
    file_text: str
    note: str
    schedule: list[list[int]] | None = None


@dataclass(frozen=True)
class Arm:
    """One server configuration of an engine: a name, and the engine's speculation
    settings (None: no speculation)."""

    name: str
    speculation: Mapping[str, Any] | None = None


class Engine(ABC):
    """What generic code asks of an engine; it never branches on the engine's name."""

    name: ClassVar[str]
    #: how the engine's server is named in texts ("vLLM", "llama-server")
    label: ClassVar[str]
    #: the speculation an arm written "ngram" runs: the engine's draft-free prompt lookup
    ngram: ClassVar[Mapping[str, Any]]
    #: prompt lookup set to draft on short replies (compat's feature probes, 32 tokens each): where
    #: ``ngram`` would propose nothing there, a probe's cell could not say whether the feature
    #: works with speculation; default: ``ngram`` itself
    eager_ngram: ClassVar[Mapping[str, Any] | None] = None
    #: the key of the draft length (k) in the engine's speculation settings
    draft_length_key: ClassVar[str]
    #: the key that names the speculation method in the settings
    method_key: ClassVar[str]
    #: specdec's capture plugin writes per-round rows for this engine's servers
    writes_rounds: ClassVar[bool] = False
    #: the file the engine serves: "folder" (a Hugging Face model folder) or "gguf"
    model_kind: ClassVar[str]
    #: specdec can make quantized copies of the model for it (compat's quantization cells)
    makes_quantized_targets: ClassVar[bool] = False
    #: specdec builds the server from source itself (``specdec engine build NAME``); else it is installed
    built_here: ClassVar[bool] = False
    #: specdec's counter key (a MetricSnapshot field) -> the engine's Prometheus metric name
    #: (summed over label sets); a key the engine lacks stays NULL in the snapshots
    counters: ClassVar[Mapping[str, str]]
    #: the per-position accepted-token counter and its position label, if the engine has one
    position_counter: ClassVar[tuple[str, str] | None] = None
    health_path: ClassVar[str] = "/health"
    #: the server has vLLM's POST /reset_prefix_cache (--prefix-cache reset)
    resets_prefix_cache: ClassVar[bool] = True
    #: the server flag that turns its prefix (prompt) cache off (--prefix-cache off)
    prefix_cache_off_flag: ClassVar[str]
    #: how the lossless pass asks for token ids and top-2 logprobs (``replay/passes/lossless.py``):
    #: "chat", /v1/chat/completions streamed with logprobs; "completion", llama-server's own endpoint
    lossless_protocol: ClassVar[str] = "chat"

    @abstractmethod
    def executable(self) -> list[str]:
        """The program that serves (and its fixed arguments)."""

    @abstractmethod
    def server_args(self, arm: Arm, *, model: str) -> list[str]:
        """The settings of a server for ``arm``: what the run manifest records as the arm's
        ``server_args`` (no host or port, which are per start)."""

    def server_command(self, arm: Arm, *, model: str, port: int, host: str = "127.0.0.1") -> list[str]:
        """The argument list that starts a server for ``arm`` on ``host:port``."""
        return [*self.executable(), "--host", host, "--port", str(port), *self.server_args(arm, model=model)]

    def server_env(self, arm: Arm) -> dict[str, str]:
        """Environment variables the server needs beyond the caller's."""
        return {}

    @abstractmethod
    def speculation_args(self, arm: Arm) -> list[str]:
        """The arguments that differ between arms: the only allowed difference."""

    def check_speculation(self, speculation: Mapping[str, Any]) -> None:
        """Raise ValueError, saying why, if this engine cannot run ``speculation`` (checked
        before a run folder exists); the default takes what the engine's own checks take."""
        self.speculation_args(Arm("check", speculation))

    def with_draft_length(self, speculation: Mapping[str, Any], k: int) -> dict[str, Any]:
        """``speculation`` with its draft length set to ``k`` (a sweep's arm)."""
        return {**speculation, self.draft_length_key: int(k)}

    def probe_speculation(self) -> dict[str, Any]:
        """The speculative arm of a compat probe pair (``eager_ngram``, else ``ngram``)."""
        return dict(self.eager_ngram if self.eager_ngram is not None else self.ngram)

    def self_draft_speculation(self, model: Any) -> dict[str, Any] | None:
        """A speculative arm that drafts with ``model``, the target's own file (compat's draft-model
        pair, ``--draft-pair``); None: the engine has none (vLLM's draft models need a model of
        their own, ``--draft-model``)."""
        return None

    def method_of(self, speculation: Mapping[str, Any] | None) -> str | None:
        """The speculation method's name in ``speculation`` (None: no speculation)."""
        return None if speculation is None else str(speculation.get(self.method_key))

    @abstractmethod
    def deployment(
        self, schedule: list[list[int]], one_k: int, captured: Mapping[str, Any] | None, pool_note: str
    ) -> Deployment:
        """A plan's setting for the speculative pool in this engine's form. ``schedule``: the
        planner's k per batch-size range, ``[[start, end, k], ...]`` (ranges from 1, sorted,
        the last open-ended); ``one_k``: the one k that serves the pool best over every band,
        for an engine that takes one k per server; ``captured``: the speculation the planned
        run captured (this engine's settings, or another engine's); ``pool_note``: the
        planner's words on how ``one_k`` was chosen."""

    @abstractmethod
    def request_stats(self, chunk: dict[str, Any]) -> RequestStats | None:
        """This engine's per-request speculative stats in a response chunk, or None."""

    def parse_counters(self, text: str) -> dict[str, float | None]:
        """The counters of ``counters`` in a /metrics page, each summed over its label
        sets; None for a counter the page does not have (not 0)."""
        return parse_counters(text, dict(self.counters))

    def settle_stats(self, res: Any, speculative: bool) -> None:  # res: the replay's StreamResult  # noqa: B027 - a hook whose default is to do nothing
        """Fix a finished request's speculative stats where the engine's silence has a
        meaning (llama.cpp: no draft fields on a speculative server = nothing drafted)."""

    def parse_snapshot(self, text: str) -> dict[str, Any]:
        """What a before/after snapshot records from a /metrics page: the counters
        (``parse_counters``) and ``accepted_per_position`` (``positions_list``)."""
        return {**self.parse_counters(text), "accepted_per_position": positions_list(self.parse_positions(text))}

    def parse_positions(self, text: str) -> dict[int, float]:
        """The per-position accepted-token counter by position (0-based), if the engine has one."""
        if self.position_counter is None:
            return {}
        name, label = self.position_counter
        out: dict[int, float] = {}
        for line in text.splitlines():
            if not line.startswith(name + "{"):
                continue
            labels, _, rest = line[len(name) + 1 :].partition("}")
            pos = dict(_label_pairs(labels)).get(label)
            if pos is None:
                continue
            try:
                out[int(pos)] = out.get(int(pos), 0.0) + float(rest.split()[0])
            except (TypeError, ValueError, IndexError):
                continue
        return out


def positions_list(positions: dict[int, float]) -> list[float] | None:
    """A per-position counter as a list by position (0-based; a position the page
    lacks between two it has is 0), or None when the page has none."""
    if not positions:
        return None
    return [positions.get(i, 0.0) for i in range(max(positions) + 1)]


def _label_pairs(labels: str) -> Iterator[tuple[str, str]]:
    for part in labels.split(","):
        key, _, value = part.partition("=")
        yield key.strip(), value.strip().strip('"')


def count(value: object) -> int | None:
    """A token count as the server sent it, if it is a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class EmbeddedSettings:
    """What an embedded engine takes from a run's settings (the replay's ``ReplayConfig``,
    compat's and stability's own)."""

    #: ``--model``: a model folder or GGUF file; None: the bundled SmolLM2 in the engine's form
    model: str | None
    dtype: str
    #: requests one server may batch (vLLM's max_num_seqs), at least ``max_in_flight``
    max_num_seqs: int
    #: the most requests in flight at once: the largest level
    max_in_flight: int
    #: ``--prefix-cache``: keep, reset or off
    prefix_cache: str


class EmbeddedEngine(ABC):
    """One engine of a run's embedded servers (the replay's and the experiments'), prepared from
    the run's settings (``EmbeddedSettings``). Each engine's class is in its package
    (``engines/vllm/embedded.py``, ``engines/llama_cpp/embedded.py``); ``engines.EMBEDDED`` maps
    an engine's name to it."""

    #: the engine's adapter, whose facts the class takes: ``name``; ``label``, the program that
    #: serves in the start-up messages ("starting vLLM for the baseline arm"); ``writes_rounds``,
    #: per-round rows (vLLM's capture plugin; llama.cpp has none)
    adapter_type: ClassVar[type[Engine]]
    name: ClassVar[str]
    label: ClassVar[str]
    writes_rounds: ClassVar[bool]
    #: why an engine that writes no per-round rows has none (the manifest's capture entry)
    no_rounds_reason: ClassVar[str] = ""
    #: the dtype a compat probe pair computes in, where one is set (the lossless cell's near-tie
    #: margin; None: as the model file is, e.g. a quantized GGUF)
    probe_dtype: ClassVar[str | None] = None
    #: the manifest's words for a compat probe pair's dtype
    probe_dtype_text: ClassVar[str] = ""
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
    def __init__(self, settings: EmbeddedSettings) -> None:
        """Prepare what the engine's servers need (model, binary) for a run of ``settings``."""

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

    @classmethod
    def target_model(cls, model: str | Path | None) -> Path:
        """The target model the engine serves for ``--model`` (None: the bundled one in the form the
        engine serves, ``model.bundled_model``)."""
        return Path(model) if model is not None else bundled_model(cls.adapter_type.model_kind)

    @classmethod
    def notes(cls, prefix_cache: str) -> list[str]:
        """What the manifest's notes say about this engine in a run with ``--prefix-cache
        prefix_cache`` (external servers too)."""
        return []

    @classmethod
    def package_facts(cls) -> dict[str, Any]:
        """What the manifest says of the installed engine package (vLLM's distribution and version);
        {} where the engine says it per server instead."""
        return {}

    @classmethod
    def probe_servers(
        cls, capture: Path, run_id: str, logs: list[Path], timeout_s: float, speculation: Mapping[str, Any]
    ) -> tuple[list[ServerProcess], list[str | None], str | None]:
        """A compat probe pair of this engine, not yet launched: the baseline's and the speculative
        arm's (``speculation``) servers on the bundled model, the CPU core each computes on (None:
        not bound), and the engine's version (``specdec compat``; ``capture``: where a capture
        plugin writes its rounds)."""
        raise NotImplementedError(f"{cls.name} has no compat probe pair")
