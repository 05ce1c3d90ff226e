import json

import pytest

from specdec.errors import InputFileError
from specdec.replay.traffic import BUNDLED, load_traffic, write_traffic_parquet


def test_bundled_mix_has_three_categories_of_at_least_eight_greedy_prompts():
    t = load_traffic(BUNDLED)
    counts = t.summary()["categories"]
    assert set(counts) >= {"code", "structured", "chat"}
    assert all(n >= 8 for n in counts.values())
    assert {r.temperature for r in t.rows} == {0.0}
    assert len({r.max_tokens for r in t.rows}) == 1
    assert len(t.sha256) == 64


def test_parquet_round_trip(tmp_path):
    t = load_traffic(BUNDLED)
    out = tmp_path / "mix.parquet"
    write_traffic_parquet(t, out)
    again = load_traffic(out)
    assert again.rows == t.rows


def _write(tmp_path, lines):
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_missing_field_names_file_row_and_field(tmp_path):
    good = json.dumps({"prompt_id": "a", "category": "code", "prompt": "x", "max_tokens": 8})
    bad = json.dumps({"prompt_id": "b", "category": "code", "prompt": "x"})
    p = _write(tmp_path, [good, bad])
    with pytest.raises(InputFileError) as e:
        load_traffic(p)
    msg = str(e.value)
    assert str(p) in msg and "row 2" in msg and "'max_tokens'" in msg


def test_invalid_json_and_bad_values_are_located(tmp_path):
    p = _write(tmp_path, ['{"prompt_id": "a",'])
    with pytest.raises(InputFileError, match=r"row 1.*invalid JSON"):
        load_traffic(p)
    p = _write(tmp_path, [json.dumps({"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": 0})])
    with pytest.raises(InputFileError, match=r"row 1, field 'max_tokens'"):
        load_traffic(p)


def test_duplicate_prompt_id_points_at_both_rows(tmp_path):
    row = json.dumps({"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": 8})
    with pytest.raises(InputFileError, match=r"row 2, field 'prompt_id'.*first at row 1|first at row 1.*row 2"):
        load_traffic(_write(tmp_path, [row, row]))


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        load_traffic(tmp_path / "nope.jsonl")
    p = tmp_path / "mix.csv"
    p.write_text("a,b\n")
    with pytest.raises(InputFileError, match="unknown format"):
        load_traffic(p)
