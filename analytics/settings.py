"""Settings of an analysis (not of a run): the latency SLO the ``capacity_under_slo``
mart tests each level against. Given to ``specdec analytics build`` and
``specdec report`` as options, stored in the one-row table
``int_analysis_settings`` (created here, before the views, like the computed
tables of ``build.COMPUTED``), so the marts and a notebook read the SLO the
database was built with.

Defaults: p95 time to first token at most 2000 ms and p95 time per output
token at most 100 ms (10 tokens/s, about reading speed): an interactive chat
service's SLO, stated so that a capacity figure always says what it assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEFAULT_SLO", "Slo", "TABLE", "create_table"]

TABLE = "int_analysis_settings"


@dataclass(frozen=True)
class Slo:
    ttft_p95_ms: float = 2000.0
    tpot_p95_ms: float = 100.0
    source: str = "default"  # default | given

    def __post_init__(self) -> None:
        for name in ("ttft_p95_ms", "tpot_p95_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"SLO {name} must be a positive number of ms, got {value!r}")


DEFAULT_SLO = Slo()


def create_table(con, slo: Slo | None = None) -> None:
    slo = slo or DEFAULT_SLO
    con.execute(f"create table {TABLE} (slo_ttft_p95_ms double, slo_tpot_p95_ms double, slo_source varchar)")
    con.execute(f"insert into {TABLE} values (?, ?, ?)", [slo.ttft_p95_ms, slo.tpot_p95_ms, slo.source])
