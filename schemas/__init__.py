"""Record definitions: the single source of every row specdec writes or reads.

Each pydantic model here defines one record type. The Arrow schema of its
Parquet file (``arrow.py``), the staging SQL column lists (tested) and the data
dictionary are derived from these models, never maintained twice. Records read
from a user (traffic rows, manifests) use the strict field types of
``strict.py``: no coercion, finite floats, clean labels.
"""

from specdec.schemas.records import (
    SCHEMA_VERSION,
    ArmConfig,
    MetricSnapshot,
    RequestResult,
    RoundTrace,
    RunManifest,
    StabilityResult,
    TrafficRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "ArmConfig",
    "MetricSnapshot",
    "RequestResult",
    "RoundTrace",
    "RunManifest",
    "StabilityResult",
    "TrafficRow",
]
