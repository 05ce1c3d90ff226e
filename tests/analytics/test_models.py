"""Model discovery and ordering, and staging columns = record fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.analytics.models import LAYERS, SqlModel, discover, order
from specdec.arms import by_role_columns
from specdec.errors import SpecdecError
from specdec.runfolder import LAKE_RECORDS, RECORD_FILES
from specdec.schemas.records import MetricSnapshot, RequestResult, RoundTrace, StabilityResult


def test_discover_orders_layers_then_dependencies():
    models = discover()
    names = [m.name for m in models]
    layers = [LAYERS.index(m.layer) for m in models]
    assert layers == sorted(layers)  # staging, then intermediate, then marts
    staging = {m.name for m in models if m.layer == "staging"}
    # one staging model per record file of the run-folder contract and of the lake
    # (stg_stability is written separately and may not exist yet)
    assert {"stg_rounds", "stg_requests", "stg_engine_counters", "stg_counter_scrapes"} <= staging
    # (and stg_manifest over manifest.json, under the analysis runs' ids)
    assert staging <= {f"stg_{rec.name}" for rec in (*RECORD_FILES, *LAKE_RECORDS)} | {"stg_manifest"}

    for m in models:
        for dep in m.depends_on:
            assert names.index(dep) < names.index(m.name), (m.name, dep)
    deps = {m.name: m.depends_on for m in models}
    # speedup takes its exclusion rule (failed levels) from int_levels_compared and its
    # figures from the paired rows (its intervals table is not a model, see intervals.py), and
    # the run's margin from int_run_settings
    assert deps["speedup"] == {"latency", "throughput", "int_levels_compared", "int_requests_paired",
                               "int_blocks_paired", "int_run_settings"}
    assert deps["int_level_health"] == {"stg_requests", "int_run_settings"}
    assert deps["int_rounds_attributed"] == {"stg_rounds", "stg_requests"}
    assert deps["stg_rounds"] == frozenset()


@pytest.mark.parametrize("view, model", [
    ("stg_requests", RequestResult),
    ("stg_engine_counters", MetricSnapshot),
    ("stg_stability", StabilityResult),
])
def test_staging_columns_are_record_fields(query, view, model):
    """The record's fields; a record with an arm gets the arm's own name and the run
    folder's id beside the role and the analysis run (by_role, specdec/arms.py)."""
    cols = [r["column_name"] for r in query(f"describe {view}")]
    fields = list(model.model_fields)
    assert cols == (by_role_columns(fields) if "arm" in fields else fields)


def test_stg_rounds_adds_exactly_request_id_and_is_verify_round(query):
    cols = [r["column_name"] for r in query("describe stg_rounds")]
    fields = list(RoundTrace.model_fields)
    assert [c for c in cols if c not in ("request_id", "is_verify_round")] == fields
    expected = fields[:2] + ["request_id"] + fields[2:] + ["is_verify_round"]
    assert cols == expected


def _model(name: str, layer: str, *deps: str) -> SqlModel:
    return SqlModel(name, layer, Path(f"{layer}/{name}.sql"), "select 1", frozenset(deps))


def test_order_rejects_a_cycle():
    with pytest.raises(SpecdecError, match="cycle"):
        order([_model("a", "marts", "b"), _model("b", "marts", "a")])


def test_order_rejects_staging_reading_a_mart():
    with pytest.raises(SpecdecError, match="may not read the marts model 'm'"):
        order([_model("s", "staging", "m"), _model("m", "marts")])


def test_order_is_dependency_order_within_a_layer():
    # a -> b -> c: alphabetical order would be a, b, c; dependencies reverse it
    got = order([_model("a", "marts", "b"), _model("b", "marts", "c"), _model("c", "marts"),
                 _model("s", "staging")])
    assert [m.name for m in got] == ["s", "c", "b", "a"]


def test_every_mart_column_is_named_in_its_header(query):
    """STYLE: each metric is defined in the header of the model that computes it."""
    for m in discover():
        if m.layer != "marts" or "stability" in m.name:  # stability.sql is maintained separately
            continue
        header = " ".join(line for line in m.sql.splitlines() if line.lstrip().startswith("--"))
        cols = [r["column_name"] for r in query(f"describe {m.name}")]
        undefined = [c for c in cols if c not in header]
        assert not undefined, (m.name, undefined)
