"""Traffic format version 3 (``schemas/traffic_blocks.py``): a Parquet row
may give its prompt as block ids + a tail, the blocks' texts in the file's
block table; the reader joins them, and refuses a malformed table or row
naming the file, the row (or table entry) and the field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec.errors import InputFileError
from specdec.schemas.traffic_blocks import BLOCKS_KEY
from specdec.traffic.io import load_traffic
from specdec.traffic.raw import read_traffic_records

BLOCKS = [{"block_id": 7, "text": "Alpha. ", "tokens": 2}, {"block_id": 9, "text": "Beta 世界. "}]


def _write(path, rows, blocks=BLOCKS, table_text=None):
    cols = {
        "prompt_id": [r["prompt_id"] for r in rows],
        "category": ["chat"] * len(rows),
        "prompt": pa.array([r.get("prompt") for r in rows], pa.string()),
        "max_tokens": [4] * len(rows),
        "prompt_blocks": pa.array([r.get("prompt_blocks") for r in rows], pa.list_(pa.int64())),
        "prompt_tail": pa.array([r.get("prompt_tail") for r in rows], pa.string()),
    }
    writer = pq.ParquetWriter(path, pa.table(cols).schema)
    writer.write_table(pa.table(cols))
    if blocks is not None or table_text is not None:
        writer.add_key_value_metadata({BLOCKS_KEY: table_text if table_text is not None else json.dumps(blocks)})
    writer.close()
    return path


def test_blocks_and_tail_are_joined_into_the_prompt(tmp_path):
    path = _write(
        tmp_path / "t.parquet",
        [
            {"prompt_id": "a", "prompt_blocks": [7, 9, 7], "prompt_tail": "Ask?"},
            {"prompt_id": "b", "prompt": "whole"},
            {"prompt_id": "c", "prompt_blocks": [9]},
        ],
    )
    rows = load_traffic(path).rows
    assert [r.prompt for r in rows] == ["Alpha. Beta 世界. Alpha. Ask?", "whole", "Beta 世界. "]
    assert all("prompt_blocks" not in rec for _, rec in read_traffic_records(path))


@pytest.mark.parametrize(
    "rows, table_text, where, problem",
    [
        (
            [{"prompt_id": "a", "prompt": "ok"}, {"prompt_id": "b", "prompt_blocks": [7, 8]}],
            None,
            (2, "prompt_blocks"),
            r"block id 8 \(element 1 ",
        ),
        ([{"prompt_id": "a", "prompt": "x", "prompt_blocks": [7]}], None, (1, "prompt_blocks"), "not both"),
        ([{"prompt_id": "a", "prompt": "x", "prompt_tail": "t"}], None, (1, "prompt_tail"), "without prompt_blocks"),
        ([{"prompt_id": "a", "prompt_blocks": [7]}], "{not json", (None, BLOCKS_KEY), "not JSON"),
        ([{"prompt_id": "a", "prompt_blocks": [7]}], '{"block_id": 7}', (None, BLOCKS_KEY), "JSON array"),
        ([{"prompt_id": "a", "prompt_blocks": [7]}], '[{"block_id": 7}]', (None, f"{BLOCKS_KEY}[0].text"), "required"),
        (
            [{"prompt_id": "a", "prompt_blocks": [7]}],
            '[{"block_id": "7", "text": "x"}]',
            (None, f"{BLOCKS_KEY}[0].block_id"),
            "integer",
        ),
        (
            [{"prompt_id": "a", "prompt_blocks": [7]}],
            '[{"block_id": 7, "text": "x"}, {"block_id": 7, "text": "y"}]',
            (None, f"{BLOCKS_KEY}[1].block_id"),
            "given twice",
        ),
    ],
)
def test_a_malformed_block_table_or_row_is_refused_by_file_row_and_field(tmp_path, rows, table_text, where, problem):
    path = _write(tmp_path / "t.parquet", rows, table_text=table_text)
    for read in (load_traffic, read_traffic_records):
        with pytest.raises(InputFileError, match=problem) as info:
            read(path)
        assert (info.value.row, info.value.field) == where and str(path) in str(info.value)


def test_blocks_without_a_block_table_are_refused(tmp_path):
    path = _write(tmp_path / "t.parquet", [{"prompt_id": "a", "prompt_blocks": [7]}], blocks=None)
    with pytest.raises(InputFileError, match="no block table") as info:
        load_traffic(path)
    assert info.value.field == "prompt_blocks"


def test_a_joined_prompt_is_checked_as_any_prompt(tmp_path):
    path = _write(
        tmp_path / "t.parquet",
        [{"prompt_id": "a", "prompt_blocks": [1]}],
        blocks=[{"block_id": 1, "text": "   "}],
    )
    with pytest.raises(InputFileError) as info:
        load_traffic(path)
    assert (info.value.row, info.value.field) == (1, "prompt")


def test_a_version_2_file_still_loads(tmp_path):
    path = tmp_path / "v2.parquet"
    pq.write_table(pa.table({"prompt_id": ["a"], "category": ["chat"], "prompt": ["hi"], "max_tokens": [3]}), path)
    assert [r.prompt for r in load_traffic(path).rows] == ["hi"]
