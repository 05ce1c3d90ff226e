"""The validated configuration of one replay run (what the CLI builds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_LEVELS = (1, 2, 4, 8)
DEFAULT_SPEC_CONFIG: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 4,
}


class ReplayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    traffic: Path = Field(description="Traffic mix (.parquet or .jsonl of TrafficRow).")
    runs_dir: Path = Field(default=Path("runs"), description="Parent folder of run folders.")
    run_id: str | None = Field(default=None, description="Run folder name; default: UTC timestamp.")
    levels: list[int] = Field(default=list(DEFAULT_LEVELS), description="Closed-loop concurrency levels.")
    arms: list[str] = Field(default=["baseline", "speculative"], description="Arms to run, in order.")
    speculative_config: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_SPEC_CONFIG))
    requests_per_level: int | None = Field(default=None, description="Requests per level; default: every traffic row once.")
    warmup_requests: int = Field(default=2, ge=0, description="Requests sent before an arm's first level, not recorded.")
    max_tokens: int | None = Field(default=None, description="Override every row's max_tokens.")
    # embedded engine
    model: str | None = Field(default=None, description="Model folder; default: the prepared SmolLM2.")
    dtype: str = "float32"
    max_num_seqs: int = 32
    startup_timeout_s: float = 300.0
    request_timeout_s: float = 600.0
    # external endpoints (no embedded server)
    baseline_url: str | None = None
    speculative_url: str | None = None
    served_model: str = "specdec-target"
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

    @property
    def external(self) -> bool:
        return bool(self.baseline_url or self.speculative_url)
