"""The validated configuration of one replay run (what the CLI builds).

The click options take their defaults from this model (``default_of``), so
the command line and the Python API cannot drift apart.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specdec.arms import ArmSpec, check_arms
from specdec.defaults import DTYPE, RUNS_DIR, SERVED_MODEL, STARTUP_TIMEOUT_S
from specdec.engines import DEFAULT_ENGINE, ENGINES, EngineName, Vllm
from specdec.replay.load.modes import check_values
from specdec.schemas.records import DEFAULT_MARGIN, DEFAULT_MAX_ERROR_RATE, ERROR_RATE, MARGIN
from specdec.schemas.strict import RunName
from specdec.traffic.mix import check_mix

DEFAULT_LEVELS = (1, 2, 4, 8)
#: The speculative arm's default: the default engine's draft-free prompt lookup (``Engine.ngram``,
#: vLLM's ngram proposer); another engine's run takes that engine's own (llama.cpp's ngram-mod).
DEFAULT_SPEC_CONFIG: dict[str, Any] = dict(Vllm.ngram)
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


class ClientOptions(BaseModel):
    """How a command talks to servers: timeouts and where the API key is.
    Shared by every command that sends requests (replay, demo, stability)."""

    model_config = ConfigDict(extra="forbid")

    connect_timeout_s: float = Field(default=10.0, gt=0, description="Longest wait for a connection, seconds.")
    request_timeout_s: float = Field(
        default=60.0, gt=0, description="Longest wait for the next byte of a reply (the first included), seconds."
    )
    api_key_env: str = Field(
        default=DEFAULT_API_KEY_ENV, description="Environment variable holding the API key sent as a bearer token."
    )

    @field_validator("connect_timeout_s", "request_timeout_s")
    @classmethod
    def _finite_timeouts(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number of seconds")
        return v

    def api_key(self) -> str | None:
        """Read at use, never stored in the config, the manifest or any file."""
        return os.environ.get(self.api_key_env) or None

    def client_settings(self):
        # heavy: aiohttp (ClientSettings' module); `specdec --help` imports this module for the defaults
        from specdec.http.urls import ClientSettings

        return ClientSettings(
            connect_timeout_s=self.connect_timeout_s, request_timeout_s=self.request_timeout_s, api_key=self.api_key()
        )


class ReplayConfig(ClientOptions):
    traffic: Path = Field(description="Traffic mix (.parquet or .jsonl of TrafficRow).")
    runs_dir: Path = Field(default=RUNS_DIR, description="Parent folder of run folders.")
    run_id: RunName | None = Field(default=None, description="Run folder name; default: UTC timestamp.")
    levels: list[int] = Field(
        default=list(DEFAULT_LEVELS),
        description="Closed-loop concurrency levels. Open loop "
        "(--load recorded|poisson): set to the level keys 1..N, one per time scale or rate.",
    )
    load: Literal["closed", "recorded", "poisson"] = Field(
        default="closed",
        description="closed: stepped concurrency (--levels); recorded: open loop on the rows' "
        "recorded arrival_ms, once per --time-scale; poisson: open-loop Poisson arrivals, "
        "once per --rates. Open-loop levels are keyed 1..N in the level column "
        "(specdec.replay.load.modes).",
    )
    time_scales: list[float] = Field(
        default=[1.0],
        description="--load recorded: time scales, one level each (0.1 = ten times faster; a 60 s trace in 6 s).",
    )
    rates: list[float] | None = Field(
        default=None,
        description="--load poisson: request rates in requests/s, one level each (required with --load poisson).",
    )
    arrival_seed: int = Field(
        default=0, description="--load poisson: seed of the arrival times (the same times in every arm and repeat)."
    )
    arms: list[str] = Field(default=["baseline", "speculative"], description="Arms to run, in order.")
    named_arms: list[ArmSpec] | None = Field(
        default=None,
        description="Named arms (--arm NAME=ENGINE[:SPEC], specdec.arms), in order: any number, "
        "each with its own engine and speculation, each speculative arm measured against "
        "its reference (the first arm without speculation on its engine, unless it "
        "names one). Replaces arms, speculative_config and engine's fixed pair; "
        "embedded servers only.",
    )
    speculative_config: dict[str, Any] | None = Field(
        default_factory=lambda: dict(DEFAULT_SPEC_CONFIG),
        description="vLLM --speculative-config of the speculative arm; None runs an A/A experiment: both arms "
        "identical (one embedded server serves both), so no speedup may be labelled faster or slower.",
    )
    requests_per_level: int | None = Field(
        default=None, ge=1, description="Requests per level; default: every traffic row once."
    )
    warmup_requests: int = Field(
        default=2, ge=0, description="Requests sent before an arm's first level, not recorded."
    )
    max_tokens: int | None = Field(default=None, ge=1, description="Override every row's max_tokens.")
    repeats: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Times each level runs per arm, arms interleaved (A B A B). Intervals need 2 or "
        "more; with fresh servers per repeat the shift of one server process is shared "
        "by every level of a repeat, so the intervals' degrees of freedom grow with the "
        "repeats, not the levels: 3 is the fewest that can label a 20% effect at all, "
        "4-5 label it reliably (BENCHMARKS.md, Calibration). With the sequential design (--design; "
        "the default of specdec-replay and specdec demo): the repeats before the first look.",
    )
    max_repeats: int | None = Field(
        default=None,
        ge=2,
        le=100,
        description="A sequential design: after --repeats repeats (at least 2), and after every repeat from then on, "
        "a look at the intervals closes the levels already decided, and only the open ones run "
        "again, up to this many repeats in all (>= --repeats). The repeats run one after another, "
        "all open levels each, for embedded and external servers alike; every look is recorded in "
        "the manifest. Unset (--design fixed): the fixed design, exactly --repeats repeats.",
    )
    budget_minutes: float | None = Field(
        default=None,
        gt=0,
        description="With --max-repeats: minutes of timed blocks the run may spend. A look is the last "
        "one when the time since the first timed block plus an estimate of the next repeat (the "
        "last one's time, scaled to the levels still open) would exceed it. The passes after the "
        "last repeat are not counted.",
    )
    lossless_pass: bool = Field(
        default=True,
        description="After each level, a greedy lossless pass per arm with "
        "token ids and top-2 logprobs (lossless check), apart from the timed requests.",
    )
    samples: int = Field(
        default=16,
        ge=0,
        le=1000,
        description="Rows with temperature > 0: after each level, each such prompt is sampled with "
        "this many fixed seeds per arm (logprobs on) for the distribution check; 0: off.",
    )
    restart_servers: Literal["repeat", "never"] = Field(
        default="repeat",
        description="repeat: embedded servers are started afresh before every repeat after the "
        "first (repeats then run one after another, all levels each), so the speed of "
        "one server process enters the intervals instead of biasing every figure; "
        "never: one server per arm for the whole run. External servers are never "
        "restarted.",
    )
    prefix_cache: Literal["reset", "off", "keep"] = Field(
        default="reset",
        description="reset: empty vLLM's prefix cache before every block (embedded servers run with "
        "VLLM_SERVER_DEV_MODE=1 for that); off: embedded servers without prefix caching; "
        "keep: do nothing (earlier blocks may warm later ones).",
    )
    max_error_rate: Annotated[float, ERROR_RATE] = Field(
        default=DEFAULT_MAX_ERROR_RATE,
        description="A level whose share of failed requests exceeds this is marked failed.",
    )
    margin: Annotated[float, MARGIN] = Field(
        default=DEFAULT_MARGIN,
        description="The practical margin delta, declared before the run and recorded in the "
        "manifest: a speedup whose family-wise interval lies inside [1/(1+delta), "
        "1+delta] is labelled equivalent (no effect worth having); faster and slower say "
        "whether they also clear it. 0.05: effects under 5% do not matter to you.",
    )
    mix: dict[str, float] | None = Field(
        default=None,
        description="Category shares of your service, e.g. code=0.3,chat=0.7 (0..1, summing to 1): "
        "the weights of the overall speedup in the speedup_weighted mart (recorded in the "
        "manifest); default: the traffic file's own shares. It does not change what is "
        "sent (a category's speedup does not depend on the weights); to send a "
        "re-weighted traffic, make one with `specdec traffic mix`.",
    )
    # embedded engine
    engine: EngineName = Field(
        default=DEFAULT_ENGINE,
        description="The engine (specdec/engines): vllm (embedded vLLM CPU + the capture plugin), or "
        "llama.cpp (llama-server, built once from PyPI, serving the SmolLM2 Q4_1 GGUF as "
        "shipped; no per-round rows; speculative arm --spec-type ngram-mod unless "
        "--spec-config says otherwise). With external URLs it names the servers' "
        "engine, so the right counters are read.",
    )
    model: str | None = Field(default=None, description="Model folder; default: the prepared SmolLM2.")
    dtype: str = Field(default=DTYPE, description="Model dtype of both arms (embedded engine).")
    max_num_seqs: int = 32
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    # external endpoints (no embedded server)
    baseline_url: str | None = None
    speculative_url: str | None = None
    served_model: str = SERVED_MODEL
    capture_dir: Path | None = Field(
        default=None, description="External servers: the folder their capture plugin writes to."
    )
    capture_wait_s: float = Field(
        default=5.0, ge=0, description="External capture: how long to wait for the last rows to be flushed."
    )
    progress: bool = True

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("concurrency levels must be positive integers")
        return sorted(set(v))

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list[str]) -> list[str]:
        bad = set(v) - {"baseline", "speculative"}
        if bad or not v:
            raise ValueError(f"arms must be baseline and/or speculative, got {sorted(bad) or v}")
        return v

    @field_validator("named_arms")
    @classmethod
    def _named_arms(cls, v: list[ArmSpec] | None) -> list[ArmSpec] | None:
        if v is None:
            return v
        v = check_arms(v)
        for arm in v:
            if arm.speculation is not None:
                _check_speculation(arm, f"arm {arm.name}")
        return v

    @field_validator("budget_minutes")
    @classmethod
    def _finite_budget(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number of minutes")
        return v

    @field_validator("startup_timeout_s", "capture_wait_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number of seconds")
        return v

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        return None if v is None else check_mix(v)

    @field_validator("time_scales", "rates")
    @classmethod
    def _load_values(cls, v, info):
        return check_values(v, info.field_name)

    @model_validator(mode="after")
    def _load_levels(self) -> ReplayConfig:
        """Open loop: the options of the other modes are refused, and levels
        become the level keys 1..N (specdec.replay.load.modes)."""
        if self.load != "recorded" and self.time_scales != [1.0]:
            raise ValueError("time_scales (--time-scale) is for --load recorded")
        if self.load != "poisson" and self.rates is not None:
            raise ValueError("rates (--rates) is for --load poisson")
        if self.load == "poisson" and self.rates is None:
            raise ValueError("--load poisson needs rates (--rates R1,R2,... in requests/s)")
        if self.load != "closed":
            values = self.time_scales if self.load == "recorded" else self.rates
            assert values is not None  # poisson without rates was refused above
            keys = list(range(1, len(values) + 1))
            if "levels" in self.model_fields_set and self.levels not in (list(DEFAULT_LEVELS), keys):
                raise ValueError(
                    "levels (--levels) are closed-loop concurrencies; open loop steps --time-scale or --rates"
                )
            self.levels = keys
        return self

    @model_validator(mode="after")
    def _sequential(self) -> ReplayConfig:
        """A sequential design (max_repeats) looks first after ``repeats`` repeats, so it
        needs at least the 2 an interval needs; a budget belongs to it alone."""
        if self.max_repeats is None:
            if self.budget_minutes is not None:
                raise ValueError(
                    "budget_minutes (--budget) needs max_repeats (--max-repeats): the fixed design has no looks"
                )
            return self
        if self.repeats < 2:
            raise ValueError(
                f"repeats (--repeats) {self.repeats}: a sequential design (--max-repeats) needs at least 2 "
                "repeats before its first look"
            )
        if self.max_repeats < self.repeats:
            raise ValueError(
                f"max_repeats (--max-repeats) {self.max_repeats} is below repeats (--repeats) {self.repeats}, "
                "the repeats before the first look"
            )
        return self

    @model_validator(mode="after")
    def _engine_defaults(self) -> ReplayConfig:
        """What the engine's adapter says: the speculative arm's default is the engine's own
        prompt lookup (``Engine.ngram``; llama.cpp's ngram-mod, the counterpart of vLLM's
        ngram), checked here, before a run folder exists; and an engine without a prefix
        cache reset endpoint (llama.cpp) turns 'reset' into 'off' (``--no-cache-prompt``:
        no block reuses an earlier one's prompts; measured without it, the first level of
        each llama.cpp server, cold, had 10x the TTFT of the later, warmed ones)."""
        adapter = ENGINES[self.engine]
        if self.speculative_config == DEFAULT_SPEC_CONFIG:  # the default engine's, not necessarily this one's
            self.speculative_config = dict(adapter.ngram)
        if self.speculative_config is not None:
            _check_speculation(
                ArmSpec("speculative", self.engine, self.speculative_config),
                f"--spec-config for --engine {self.engine}",
            )
        if self.prefix_cache == "reset" and not adapter.resets_prefix_cache:
            self.prefix_cache = "off"
        return self

    @model_validator(mode="after")
    def _named_arms_alone(self) -> ReplayConfig:
        if self.named_arms is None:
            return self
        if self.external:
            raise ValueError(
                "named arms (--arm) start their own servers: they do not go with --baseline-url / --speculative-url"
            )
        for name, option in (("engine", "--engine"), ("arms", "--arms"), ("speculative_config", "--spec-config")):
            if getattr(self, name) != default_of(name):
                raise ValueError(
                    f"{name} ({option}) does not go with named arms (--arm): each arm names its engine and speculation"
                )
        self.arms = [a.name for a in self.named_arms]
        return self

    @property
    def external(self) -> bool:
        return bool(self.baseline_url or self.speculative_url)

    @property
    def sequential(self) -> bool:
        """A sequential design (max_repeats): looks after the first ``repeats`` repeats."""
        return self.max_repeats is not None

    def arm_specs(self) -> list[ArmSpec]:
        """The run's arms (specdec.arms): the named arms, or the classic pair of ``arms`` on
        ``engine``, the speculative one with ``speculative_config``."""
        if self.named_arms is not None:
            return list(self.named_arms)
        return [
            ArmSpec(name, self.engine, self.speculative_config if name == "speculative" else None) for name in self.arms
        ]

    def arm_engines(self) -> dict[str, str]:
        """Each arm's engine adapter name."""
        return {a.name: a.engine for a in self.arm_specs()}


def _check_speculation(arm: ArmSpec, what: str) -> None:
    """Speculation settings that the arm's engine takes (``Engine.check_speculation``)."""
    assert arm.speculation is not None  # both callers check for speculation first
    try:
        ENGINES[arm.engine].check_speculation(arm.speculation)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def default_of(name: str, model: type[BaseModel] | None = None) -> Any:
    """The default of a config field (ReplayConfig unless another model is given), for click options."""
    field = (model or ReplayConfig).model_fields[name]
    return field.get_default(call_default_factory=True)
