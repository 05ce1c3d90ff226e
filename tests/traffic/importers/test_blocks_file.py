"""A Mooncake import writes traffic format version 3: each row's prompt as
its prefix blocks' ids and its own tail, each block's text once in the
file's block table. Read back, it gives exactly the prompts a file with
every prompt whole (version 2) gives, and rows sharing hash ids share blocks."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from click.testing import CliRunner

from specdec.schemas.records import TRAFFIC_SCHEMA_VERSION
from specdec.schemas.traffic_blocks import BLOCKS_KEY
from specdec.traffic.importers import ImportOptions, import_to_file
from specdec.traffic.io import load_traffic
from specdec.traffic.raw import read_traffic_records


def _both(traces, counter, tmp_path, name="mooncake_small.jsonl", **opts):
    v3, v2 = tmp_path / "v3.parquet", tmp_path / "v2.parquet"
    import_to_file("mooncake", traces / name, ImportOptions(category="code", **opts), v3, counter=counter)
    import_to_file("mooncake", traces / name, ImportOptions(category="code", **opts), v2, counter=counter, blocks=False)
    return v3, v2


def test_a_version_3_file_reads_as_the_version_2_file_of_the_same_input(traces, counter, tmp_path):
    v3, v2 = _both(traces, counter, tmp_path)
    assert read_traffic_records(v3) == read_traffic_records(v2)
    assert load_traffic(v3).rows == load_traffic(v2).rows
    table = pq.read_table(v3)
    assert "prompt_blocks" not in pq.read_table(v2).column_names
    assert table.column("prompt").null_count >= 1  # the rows composed of blocks give no whole prompt
    assert pq.ParquetFile(v3).schema_arrow.metadata[b"traffic_schema_version"] == TRAFFIC_SCHEMA_VERSION.encode()


def test_the_block_table_holds_each_block_once_and_rows_sharing_hash_ids_share_block_ids(traces, counter, tmp_path):
    v3, _ = _both(traces, counter, tmp_path)
    blocks = json.loads(pq.ParquetFile(v3).metadata.metadata[BLOCKS_KEY.encode()])
    ids = [b["block_id"] for b in blocks]
    assert ids == sorted(set(ids)) and all(b["text"] and b["tokens"] > 0 for b in blocks)
    rows = pq.read_table(v3).to_pylist()
    stored = {r["prompt_id"]: r["prompt_blocks"] for r in rows}
    # rows 1 and 3 give hash ids [0, 1, 2], row 2 [0, 3]: they lead with the same block
    first = [stored[k][0] for k in ("mooncake-r1", "mooncake-r2", "mooncake-r3") if stored[k]]
    assert len(first) >= 2 and len(set(first)) == 1
    texts = {b["block_id"]: b["text"] for b in blocks}
    whole = {r["prompt_id"]: r["prompt"] for _, r in read_traffic_records(v3)}
    for r in rows:
        if r["prompt_blocks"] is not None:
            assert whole[r["prompt_id"]] == "".join(texts[i] for i in r["prompt_blocks"]) + r["prompt_tail"]


def test_other_formats_still_write_version_2(traces, counter, tmp_path):
    out = tmp_path / "a.parquet"
    import_to_file("azure", traces / "azure_conv_excerpt.csv", ImportOptions(), out, counter=counter)
    pf = pq.ParquetFile(out)
    assert "prompt_blocks" not in pf.schema_arrow.names and BLOCKS_KEY.encode() not in pf.metadata.metadata


def test_validate_passes_a_version_3_file(traces, counter, tmp_path):
    from specdec.cli.validate import validate_command

    v3, _ = _both(traces, counter, tmp_path)
    r = CliRunner().invoke(validate_command, [str(v3)])
    assert r.exit_code == 0, r.output
