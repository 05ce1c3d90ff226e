"""The counter columns come from one table (``schemas.counters.COUNTER_FIELDS``) and
the records built from it keep the Arrow schemas they had when each record wrote
its own (``tests/fixtures/schemas/counter_arrow_schemas.txt``, printed before the change)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specdec.engines.metrics import COUNTERS, GAUGES
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.counters import COUNTER_FIELDS, ENGINE_COUNTERS, SPEC_COUNTERS, CounterScrape, with_counters
from specdec.schemas.records import MetricSnapshot, PassCounters

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "counter_arrow_schemas.txt"


def test_arrow_schemas_are_those_of_before():
    now = "".join(f"{m.__name__}\n{arrow_schema(m)}\n" for m in (MetricSnapshot, PassCounters, CounterScrape))
    assert now == FIXTURE.read_text(encoding="utf-8")


def test_the_table_is_the_engine_readers_table():
    """The reader's names come from the table (issue 44, item 6): every column is read, once."""
    assert {k: metric for k, (metric, _) in COUNTER_FIELDS.items()} == {
        **COUNTERS,
        **{k: name for k, (name, _how) in GAUGES.items()},
    }
    assert list(COUNTERS) == list(ENGINE_COUNTERS) and not set(COUNTERS) & set(GAUGES)
    assert GAUGES["kv_cache_usage"][1]([0.2, 0.5]) == 0.5 and GAUGES["requests_running"][1]([1.0, 2.0]) == 3.0


def test_each_record_takes_its_columns_and_descriptions_from_the_table():
    for model, keys in (
        (CounterScrape, list(COUNTER_FIELDS)),
        (MetricSnapshot, ENGINE_COUNTERS),
        (PassCounters, SPEC_COUNTERS),
    ):
        for key in keys:
            metric, meaning = COUNTER_FIELDS[key]
            assert model.model_fields[key].description.startswith(f"{metric} ({meaning}); None if "), (model, key)
    # required where they were required, None by default where files without them exist
    assert MetricSnapshot.model_fields["prefix_cache_hits"].default is None
    assert MetricSnapshot.model_fields["spec_num_drafts"].is_required()
    assert all(PassCounters.model_fields[k].is_required() for k in SPEC_COUNTERS)
    with pytest.raises(ValidationError):  # extra="forbid" survives the rebuild
        PassCounters(
            run_id="r", arm="baseline", level=1, pass_kind="lossless_pass", position="before",
            wall_time_ns=1, surplus=1, **dict.fromkeys(SPEC_COUNTERS),
        )  # fmt: skip


def test_with_counters_refuses_what_it_cannot_rebuild():
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")

    with pytest.raises(TypeError, match="no field 'when'"):
        with_counters("when", SPEC_COUNTERS, none_if="absent")(type("Row", (Strict,), {"__annotations__": {"at": int}}))

    class OwnConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")
        at: int = Field(description="a")

    with pytest.raises(TypeError, match="model_config on its base"):
        with_counters("at", SPEC_COUNTERS, none_if="absent")(OwnConfig)

    class OwnMethod(Strict):
        at: int = Field(description="a")

        def twice(self) -> int:
            return 2 * self.at

    with pytest.raises(TypeError, match=r"drop its own \['twice'\]"):
        with_counters("at", SPEC_COUNTERS, none_if="absent")(OwnMethod)
