"""Record definitions: the single source of every row specdec writes or reads.

Each pydantic model here defines one record type. The Arrow schema of its
Parquet file (``arrow.py``), the staging SQL column lists (tested) and the data
dictionary are derived from these models, never maintained twice.
"""

from specdec.schemas.records import (
    SCHEMA_VERSION,
    MetricSnapshot,
    RequestResult,
    RoundTrace,
    RunManifest,
    TrafficRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "MetricSnapshot",
    "RequestResult",
    "RoundTrace",
    "RunManifest",
    "TrafficRow",
]
