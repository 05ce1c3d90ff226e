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
