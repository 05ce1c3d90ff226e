import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec.schemas.arrow import arrow_schema, table_from_columns, table_from_records, write_parquet_atomic
from specdec.schemas.records import SCHEMA_VERSION, RequestResult, RoundTrace, TrafficRow


def test_arrow_schema_follows_model_fields_and_nullability():
    schema = arrow_schema(RoundTrace)
    assert schema.names == list(RoundTrace.model_fields)
    assert schema.field("draft_ms").type == pa.float64() and schema.field("draft_ms").nullable
    assert schema.field("tokens_proposed").type == pa.int64() and not schema.field("tokens_proposed").nullable
    assert schema.field("phase").type == pa.string()
    assert arrow_schema(RequestResult).field("chunk_offsets_ms").type == pa.list_(pa.float64())
    assert schema.metadata[b"schema_version"] == SCHEMA_VERSION.encode()


def test_written_parquet_carries_schema_version(tmp_path):
    rows = [TrafficRow(prompt_id="a", category="code", prompt="x", max_tokens=4)]
    path = tmp_path / "t.parquet"
    write_parquet_atomic(table_from_records(TrafficRow, rows), path)
    meta = pq.read_schema(path).metadata
    assert meta[b"schema_version"] == SCHEMA_VERSION.encode()
    assert meta[b"record"] == b"TrafficRow"
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_column_buffers_reject_null_in_required_column():
    cols = {f: [None] for f in RoundTrace.model_fields}
    with pytest.raises(ValueError, match=r"RoundTrace\.run_id: 1 null"):
        table_from_columns(RoundTrace, cols)


def _requests(n: int, offset: int = 0) -> pa.Table:
    """``n`` request rows whose chunk lists make a row about 4 KB wide, as in a real run."""
    rows = [
        RequestResult(
            run_id="r",
            arm="baseline",
            level=1,
            request_id=f"r{offset + i}",
            prompt_id=f"p{i}",
            category="code",
            max_tokens=500,
            temperature=0.0,
            success=True,
            error_type=None,
            error_message=None,
            wall_send_ns=0,
            ttft_ms=0.0,
            e2e_ms=499.0,
            chunk_offsets_ms=[float(j) for j in range(500)],
            prompt_tokens=10,
            output_tokens=500,
            output_text="x",
            finish_reason="length",
            spec_num_steps=None,
            spec_num_draft_tokens=None,
            spec_num_accepted_tokens=None,
        )
        for i in range(n)
    ]
    return table_from_records(RequestResult, rows)


def test_written_row_groups_hold_at_most_the_byte_bound(tmp_path, monkeypatch):
    import specdec.schemas.arrow as arrow_mod

    monkeypatch.setattr(arrow_mod, "ROW_GROUP_BYTES", 40_000)  # ~10 rows of 4 KB
    table = _requests(95)
    assert 9 <= arrow_mod.row_group_rows(table) <= 10
    write_parquet_atomic(table, tmp_path / "r.parquet")
    meta = pq.ParquetFile(tmp_path / "r.parquet").metadata
    assert meta.num_rows == 95 and meta.num_row_groups >= 10
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= 10
    monkeypatch.undo()  # the shipped bound: 64 MiB
    narrow = pa.table({"x": pa.array(range(3_000_000), pa.int32())})
    assert arrow_mod.row_group_rows(narrow) == arrow_mod.ROW_GROUP_ROWS  # 1,048,576: pyarrow's own default


def test_a_merge_streams_its_sources_into_bounded_row_groups_in_order(tmp_path, monkeypatch):
    import specdec.schemas.arrow as arrow_mod

    monkeypatch.setattr(arrow_mod, "ROW_GROUP_BYTES", 40_000)
    schema = arrow_schema(RequestResult)
    sources = []
    for k, n in enumerate([3, 4, 30, 2]):  # small parts are gathered, a large one is split
        sources.append(tmp_path / f"part-{k}.parquet")
        pq.write_table(_requests(n, offset=100 * k), sources[-1])
    out = tmp_path / "requests.parquet"
    assert arrow_mod.merge_parquet_atomic(sources, schema, out) == 39
    merged = pq.ParquetFile(out)
    groups = [merged.metadata.row_group(i).num_rows for i in range(merged.metadata.num_row_groups)]
    assert sum(groups) == 39 and max(groups) <= 10 and len(groups) < 39
    ids = merged.read(columns=["request_id"]).column(0).to_pylist()
    assert ids == [f"r{100 * k + i}" for k, n in enumerate([3, 4, 30, 2]) for i in range(n)]
    assert merged.schema_arrow.metadata[b"record"] == b"RequestResult"
    assert merged.read(columns=["chunk_offsets_ms"]).column(0)[38].as_py() == [float(j) for j in range(500)]


def test_a_merge_with_an_unreadable_source_leaves_the_target_as_it_was(tmp_path):
    from specdec.schemas.arrow import merge_parquet_atomic

    schema = arrow_schema(RequestResult)
    good = tmp_path / "good.parquet"
    pq.write_table(_requests(2), good)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not a parquet file")
    out = tmp_path / "requests.parquet"
    out.write_bytes(b"before")
    with pytest.raises(pa.ArrowInvalid):
        merge_parquet_atomic([good, bad], schema, out)
    assert out.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet", "good.parquet", "requests.parquet"]


def test_a_merge_reads_a_part_written_before_an_optional_column_as_null(tmp_path):
    from specdec.schemas.arrow import merge_parquet_atomic

    schema = arrow_schema(RequestResult)
    new = tmp_path / "new.parquet"
    pq.write_table(_requests(2), new)
    old = tmp_path / "old.parquet"
    pq.write_table(_requests(1, offset=10).drop_columns(["chunk_tokens"]), old)  # a file from before the column
    out = tmp_path / "requests.parquet"
    assert merge_parquet_atomic([new, old], schema, out) == 3
    merged = pq.read_table(out)
    assert merged.schema.names == schema.names
    assert merged.column("request_id").to_pylist() == ["r0", "r1", "r10"]
    assert merged.column("chunk_tokens").to_pylist() == [None, None, None]
