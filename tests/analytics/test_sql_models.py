"""Model discovery, dependencies parsed from the SQL, ordering, and staging columns =
record fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.analytics import build, settings
from specdec.analytics.sql_models import COMPUTED_TABLES, LAYERS, SOURCES, SqlModel, discover, order, relations_read
from specdec.arms import by_role_columns
from specdec.errors import SpecdecError
from specdec.runfolder import LAKE_RECORDS, RECORD_FILES
from specdec.schemas.compat import CompatCell
from specdec.schemas.counters import CounterScrape
from specdec.schemas.records import (
    GreedyCheck,
    MetricSnapshot,
    PassCounters,
    RequestResult,
    ResourceReading,
    RoundTrace,
    SampleCheck,
    StabilityResult,
)


def test_discover_orders_layers_then_dependencies():
    models = discover()
    names = [m.name for m in models]
    layers = [LAYERS.index(m.layer) for m in models]
    assert layers == sorted(layers)  # staging, then intermediate, then marts
    staging = {m.name for m in models if m.layer == "staging"}
    # one staging model per record file of the run-folder contract and of the lake
    # (stg_stability is written separately and may not exist yet)
    assert {"stg_rounds", "stg_requests", "stg_engine_counters", "stg_counter_scrapes"} <= staging
    # (and stg_manifest over manifest.json, under the analysis runs' ids; stg_request_streams:
    # the requests' streamed content, the bulk of the record, apart from stg_requests)
    assert staging <= {f"stg_{rec.name}" for rec in (*RECORD_FILES, *LAKE_RECORDS)} | {
        "stg_manifest",
        "stg_request_streams",
    }

    for m in models:
        for dep in m.depends_on:
            assert names.index(dep) < names.index(m.name), (m.name, dep)
    deps = {m.name: m.depends_on for m in models}
    # speedup takes its exclusion rule (failed levels) from int_levels_compared and its
    # figures from the paired rows (its intervals table is not a model, see intervals.py), and
    # the run's margin from int_run_settings
    assert deps["speedup"] == {
        "latency",
        "throughput",
        "int_levels_compared",
        "int_requests_paired",
        "int_blocks_paired",
        "int_run_settings",
    }
    assert deps["int_level_health"] == {"stg_requests", "int_run_settings"}
    assert deps["int_rounds_attributed"] == {"stg_rounds", "stg_requests"}
    assert deps["stg_rounds"] == frozenset()
    # a column, alias or CTE named like a model is not a dependency (they were when the
    # names were matched in the text): speedup_weighted has a column speedup,
    # speedup_by_input_length a CTE latency, lossless a CTE level_health
    assert "speedup" not in deps["speedup_weighted"] | deps["speedup_natural_end"]
    assert not {"speedup", "latency"} & deps["speedup_by_input_length"]
    assert "level_health" not in deps["lossless"]


def test_build_order_respects_every_parsed_dependency():
    """Every model that a model's SQL reads (parsed anew here) is created before it."""
    models = discover()
    position = {m.name: i for i, m in enumerate(models)}
    for m in models:
        reads = relations_read(m.sql, m.path)
        assert reads == m.depends_on | m.sources, m.name
        for dep in reads & position.keys():
            assert position[dep] < position[m.name], (m.name, dep)


def test_sources_are_what_the_build_creates_before_the_models(query):
    """SOURCES names the computed tables of build.COMPUTED and settings; every source a model
    reads exists in a built database (raw relations, manifest, roles, computed tables)."""
    assert COMPUTED_TABLES == {c.TABLE for c in build.COMPUTED} | {settings.TABLE}
    read = set().union(*(m.sources for m in discover()))
    assert read <= SOURCES
    tables = {
        r["name"]
        for r in query("select table_name as name from duckdb_tables() union all select view_name from duckdb_views()")
    }
    assert read <= tables, read - tables
    # staging reads its raw relation through by_role('raw_...'), which the parse follows
    assert {m.name: m.sources for m in discover()}["stg_requests"] == {"raw_requests"}


def _write(root: Path, layer: str, name: str, sql: str) -> Path:
    """A model file in ``layer`` (a mart or intermediate model in the ``health`` domain)."""
    for each in LAYERS:
        (root / each).mkdir(parents=True, exist_ok=True)
    folder = root / layer / ("" if layer == "staging" else "health")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.sql"
    kind = "TABLE" if layer == "marts" else "VIEW"
    path.write_text(f"MODEL (name {name}, kind {kind}, grain (x));\n-- Grain: test.\n{sql}\n")
    return path


def test_a_column_named_like_a_model_is_no_dependency(tmp_path):
    _write(tmp_path, "marts", "speedup", "select 1 as speedup")
    _write(tmp_path, "marts", "latency", "select 1 as latency")
    # a column, a qualified column, an alias, a CTE and a string all named like models
    _write(
        tmp_path,
        "marts",
        "speedup_weighted",
        "with latency as (select 2 as speedup) "
        "select speedup, speedup.x as y, 'speedup' as label from (select 1 as x) speedup, latency",
    )
    _write(tmp_path, "marts", "reads_both", "select * from speedup join latency using (x)")
    deps = {m.name: m.depends_on for m in discover(tmp_path)}
    assert deps == {"speedup": set(), "latency": set(), "speedup_weighted": set(), "reads_both": {"speedup", "latency"}}


def test_a_cte_does_not_hide_the_model_it_reads(tmp_path):
    _write(tmp_path, "intermediate", "int_a", "select 1 as x")
    _write(tmp_path, "marts", "m", "with int_a as (select * from int_a) select * from int_a")
    _write(tmp_path, "marts", "n", "select * from (select 1) t where t.x in (select x from m)")
    deps = {m.name: m.depends_on for m in discover(tmp_path)}
    assert deps["m"] == {"int_a"} and deps["n"] == {"m"}


def test_a_reference_to_an_unknown_model_names_the_file(tmp_path):
    _write(tmp_path, "intermediate", "int_round_counts", "select 1 as x")
    path = _write(tmp_path, "marts", "acceptance", "with r as (select * from int_round_count) select * from r")
    with pytest.raises(SpecdecError) as err:
        discover(tmp_path)
    assert str(err.value).startswith(f"{path}: reads 'int_round_count', which is neither a model")


def test_sql_that_does_not_parse_names_the_file(tmp_path):
    path = _write(tmp_path, "marts", "broken", "select from from where")
    with pytest.raises(SpecdecError, match=f"^{path}: the SQL does not parse"):
        discover(tmp_path)


@pytest.mark.parametrize(
    "view, model",
    [
        ("stg_requests", RequestResult),
        ("stg_engine_counters", MetricSnapshot),
        ("stg_stability", StabilityResult),
        ("stg_pass_counters", PassCounters),
        ("stg_resources", ResourceReading),
        ("stg_greedy_checks", GreedyCheck),
        ("stg_sample_checks", SampleCheck),
        ("stg_counter_scrapes", CounterScrape),
        ("stg_compat", CompatCell),
    ],
)
def test_staging_columns_are_record_fields(query, view, model):
    """The record's fields, in its order (the staging models that select * from the raw view are
    held to it here); a record with an arm gets the arm's own name and the run folder's id beside
    the role and the analysis run (by_role, specdec/arms.py). The requests' streamed content is
    in stg_request_streams instead (STREAMED)."""
    cols = [r["column_name"] for r in query(f"describe {view}")]
    fields = [f for f in model.model_fields if not (view == "stg_requests" and f in STREAMED)]
    assert cols == (by_role_columns(fields) if "arm" in fields else fields)


#: RequestResult's fields that stg_request_streams holds and stg_requests does not: the bulk
#: of a run (a chunk per engine step, texts of kilobytes), read only by the models that need it.
STREAMED = ("chunk_offsets_ms", "chunk_tokens", "output_text")


def test_stg_request_streams_holds_the_streamed_fields_with_the_request_keys(query):
    cols = [r["column_name"] for r in query("describe stg_request_streams")]
    keys = ["level", "repeat", "request_id", "prompt_id", "category", "success", "temperature"]
    assert cols == by_role_columns(["run_id", "arm", *keys, *STREAMED])
    assert set(keys) <= set(RequestResult.model_fields)


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
    got = order([_model("a", "marts", "b"), _model("b", "marts", "c"), _model("c", "marts"), _model("s", "staging")])
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
