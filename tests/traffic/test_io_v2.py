"""Traffic format version 2: chat messages, sampling settings as sent,
arrival time, sessions, recorded response; version-1 rows still load."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec.errors import InputFileError
from specdec.replay.http.client import build_payload
from specdec.schemas.records import TrafficRow
from specdec.traffic.io import BUNDLED, load_traffic, write_traffic_parquet

TURNS = [
    {"role": "user", "content": "Write a haiku."},
    {"role": "assistant", "content": "Leaves fall..."},
    {"role": "user", "content": "Another, about code."},
]
V2 = {
    "prompt_id": "s1-t1",
    "category": "chat",
    "messages": json.dumps(TURNS),
    "max_tokens": 40,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 50,
    "seed": 7,
    "stop": ["\n\n"],
    "model": "gpt-x",
    "arrival_ms": 1250.5,
    "session_id": "s1",
    "turn_index": 1,
    "input_tokens": 31,
    "recorded_output_tokens": 40,
    "ended_naturally": True,
    "tier": "low",
    "source": "proxy",
    "response_format": json.dumps({"type": "json_object"}),
    "tools": None,
    "content_note": None,
}


def write_jsonl(tmp_path, *rows) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_a_version_2_row_loads_and_is_sent_as_recorded(tmp_path):
    (row,) = load_traffic(write_jsonl(tmp_path, V2)).rows
    assert row.chat() == TURNS and (row.session_id, row.turn_index, row.arrival_ms) == ("s1", 1, 1250.5)
    body = build_payload("served", row)
    assert body["messages"] == TURNS and body["model"] == "served"
    assert (body["top_p"], body["top_k"], body["seed"]) == (0.9, 50, 7)
    assert body["response_format"] == {"type": "json_object"} and "tools" not in body
    # forced to the recorded length: ignore_eos, and the stop strings are not sent
    assert body["max_tokens"] == 40 and body["ignore_eos"] is True and "stop" not in body


def test_version_1_rows_are_version_2_rows():
    rows = load_traffic(BUNDLED).rows
    assert rows and all(r.messages is None and r.arrival_ms is None and r.source is None for r in rows)
    assert build_payload("m", rows[0])["messages"] == [{"role": "user", "content": rows[0].prompt}]
    assert "top_p" not in build_payload("m", rows[0])


@pytest.mark.parametrize(
    "change, field, problem",
    [
        ({"prompt": "hi"}, None, "exactly one of the fields prompt"),
        ({"messages": None}, None, "exactly one of the fields prompt"),
        ({"messages": "[]"}, "messages", "non-empty JSON array"),
        ({"messages": '[{"content": "x"}]'}, "messages", r"messages\[0\] must be an object with a string 'role'"),
        ({"messages": "not json"}, "messages", "JSON array of chat messages"),
        ({"turn_index": None}, None, "session_id and turn_index go together"),
        ({"top_p": 0.0}, "top_p", "greater than 0"),
        ({"arrival_ms": -1.0}, "arrival_ms", "greater than or equal to 0"),
        ({"tier": "very"}, "tier", "high"),
        ({"response_format": "{oops"}, "response_format", "must be JSON text"),
        ({"ended_naturally": 1}, "ended_naturally", "boolean"),
    ],
)
def test_bad_version_2_fields_are_named_with_the_row(tmp_path, change, field, problem):
    p = write_jsonl(tmp_path, {"prompt_id": "ok", "category": "c", "prompt": "x", "max_tokens": 4}, V2 | change)
    where = rf"row 2, field '{field}'" if field else "row 2"
    with pytest.raises(InputFileError, match=rf"{where}: .*{problem}"):
        load_traffic(p)


def test_parquet_round_trip_with_nulls_in_optional_columns(tmp_path):
    rows = [TrafficRow.model_validate(V2), TrafficRow(prompt_id="p", category="code", prompt="x", max_tokens=8)]
    traffic = load_traffic(write_jsonl(tmp_path, *[r.model_dump() for r in rows]))
    out = tmp_path / "t.parquet"
    write_traffic_parquet(traffic, out)
    table = pq.read_table(out)
    assert table.column("arrival_ms").null_count == 1 and table.schema.field("stop").type == pa.list_(pa.string())
    assert load_traffic(out).rows == rows
