import hashlib
import json

import pytest

from specdec.errors import InputFileError
from specdec.traffic.io import BUNDLED, load_traffic, write_traffic_parquet


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


# ---------------------------------------------------------------- strict inputs
# Each case below was accepted (or mislocated) before issue 5.
GOOD = {"prompt_id": "a", "category": "code", "prompt": "x", "max_tokens": 8}


def _jsonl(tmp_path, *objs, name="mix.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "field, value, found",
    [
        ("max_tokens", "12", "string '12'"),
        ("max_tokens", True, "boolean true"),
        ("max_tokens", 1.5, "number 1.5"),
        ("max_tokens", 12.0, "number 12.0"),
        ("temperature", "0.5", "string '0.5'"),
        ("temperature", False, "boolean false"),
        ("prompt_id", 7, "number 7"),
        ("category", None, "null"),
    ],
)
def test_values_of_the_wrong_json_type_are_refused_not_coerced(tmp_path, field, value, found):
    p = _jsonl(tmp_path, GOOD | {"prompt_id": "b"}, GOOD | {field: value})
    with pytest.raises(InputFileError) as e:
        load_traffic(p)
    msg = str(e.value)
    assert f"row 2, field '{field}'" in msg and f"got {found}" in msg


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_refused(tmp_path, literal):
    p = tmp_path / "mix.jsonl"
    p.write_text(f'{{"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": 8, "temperature": {literal}}}\n')
    with pytest.raises(InputFileError, match=rf"row 1: {literal} is not valid JSON"):
        load_traffic(p)


def test_a_float_that_overflows_to_infinity_is_refused(tmp_path):
    p = tmp_path / "mix.jsonl"
    p.write_text('{"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": 8, "temperature": 1e999}\n')
    with pytest.raises(InputFileError, match=r"row 1, field 'temperature': .*finite"):
        load_traffic(p)


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("prompt", " \t\n ", "not only whitespace"),
        ("prompt", "\u3000\u2028", "not only whitespace"),
        ("prompt", "a\x00b", "NUL"),
        ("prompt_id", " a", "whitespace"),
        ("category", "code ", "whitespace"),
        ("category", "", "empty"),
        ("category", "co\nde", "control characters"),
        ("prompt_id", "a\x1bb", "control characters"),
        ("category", "a\u2028b", "control characters"),
        ("max_tokens", 1_000_001, "less than or equal to 1000000"),
        ("temperature", 2.5, "less than or equal to 2"),
    ],
)
def test_text_and_range_rules(tmp_path, field, value, problem):
    p = _jsonl(tmp_path, GOOD | {field: value})
    with pytest.raises(InputFileError, match=rf"row 1, field '{field}': .*{problem}"):
        load_traffic(p)


def test_a_lone_surrogate_is_refused(tmp_path):
    p = tmp_path / "mix.jsonl"
    p.write_text('{"prompt_id": "a", "category": "c", "prompt": "x\\ud800", "max_tokens": 8}\n')
    with pytest.raises(InputFileError, match=r"row 1, field 'prompt': .*lone surrogate \(U\+D800"):
        load_traffic(p)


def test_non_utf8_bytes_name_the_row_and_byte_offset(tmp_path):
    p = tmp_path / "mix.jsonl"
    line1 = (json.dumps(GOOD) + "\n").encode()
    line2 = b'{"prompt_id": "b", "category": "c", "prompt": "caf\xe9", "max_tokens": 8}\n'
    p.write_bytes(line1 + line2)
    col = line2.index(b"\xe9")
    offset = len(line1) + col
    with pytest.raises(InputFileError) as e:
        load_traffic(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}, row 2: not UTF-8: byte 0xe9 at byte offset {offset} ")
    assert f"(byte {col + 1} of the line)" in msg


def test_a_utf8_bom_is_accepted_and_hashed_as_is(tmp_path):
    p = tmp_path / "mix.jsonl"
    data = b"\xef\xbb\xbf" + (json.dumps(GOOD) + "\n").encode()
    p.write_bytes(data)
    t = load_traffic(p)
    assert [r.prompt_id for r in t.rows] == ["a"]
    assert t.sha256 == hashlib.sha256(data).hexdigest()


def test_lines_split_only_on_newline_and_crlf_works(tmp_path):
    # U+2028, U+2029, U+0085, \x0b, \x0c, \x1c inside a JSON string are text, not line breaks;
    # odd Unicode in labels and control characters in prompts are allowed (see specdec.schemas.strict).
    odd = "one\u2028two\u2029three\x85four\x0bfive\x0csix\x1cseven\ttab\x07 \u202e"
    p = tmp_path / "mix.jsonl"
    p.write_bytes(
        (
            json.dumps(GOOD | {"prompt": odd, "prompt_id": "ид-1", "category": "código 🚀"}, ensure_ascii=False)
            + "\r\n"
            + json.dumps(GOOD | {"prompt_id": "b", "temperature": 2, "max_tokens": 1_000_000})
            + "\r\n"
        ).encode()
    )
    rows = load_traffic(p).rows
    assert [r.prompt_id for r in rows] == ["ид-1", "b"]
    assert rows[0].prompt == odd and rows[0].category == "código 🚀"
    assert rows[1].temperature == 2.0 and isinstance(rows[1].temperature, float)


def test_rows_are_line_numbers_even_after_blank_lines(tmp_path):
    p = tmp_path / "mix.jsonl"
    p.write_text(json.dumps(GOOD) + "\n\n   \n" + json.dumps(GOOD | {"prompt_id": "b", "max_tokens": 0}) + "\n")
    with pytest.raises(InputFileError, match=r"row 4, field 'max_tokens'"):
        load_traffic(p)


def test_duplicate_keys_in_one_object_are_refused(tmp_path):
    p = tmp_path / "mix.jsonl"
    p.write_text('{"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": 8, "max_tokens": 9}\n')
    with pytest.raises(InputFileError, match=r"row 1, field 'max_tokens': key 'max_tokens' appears twice"):
        load_traffic(p)


def test_a_top_level_non_object_and_hostile_json_name_the_row(tmp_path):
    p = _jsonl(tmp_path, GOOD, [GOOD])
    with pytest.raises(InputFileError, match=r"row 2: each line must be a JSON object, got array"):
        load_traffic(p)
    p.write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "\n")
    with pytest.raises(InputFileError, match=r"row 2: invalid JSON"):
        load_traffic(p)
    p.write_text('{"prompt_id": "a", "category": "c", "prompt": "x", "max_tokens": ' + "9" * 5000 + "}\n")
    with pytest.raises(InputFileError, match=r"row 1: invalid JSON"):
        load_traffic(p)


def test_max_tokens_must_fit_the_models_context_when_known(tmp_path):
    p = _jsonl(tmp_path, GOOD | {"max_tokens": 100}, GOOD | {"prompt_id": "b", "max_tokens": 2048})
    assert len(load_traffic(p).rows) == 2
    assert len(load_traffic(p, max_model_len=2049).rows) == 2
    with pytest.raises(InputFileError, match=r"row 2, field 'max_tokens': max_tokens 2048 does not fit .* 2048"):
        load_traffic(p, max_model_len=2048)


# ---------------------------------------------------------------- Parquet columns
def _parquet(tmp_path, columns: dict, schema=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "mix.parquet"
    pq.write_table(pa.table(columns, schema=schema), p)
    return p


BASE_COLS = {"prompt_id": ["a", "b"], "category": ["c", "c"], "prompt": ["x", "y"], "max_tokens": [8, 8]}


def test_parquet_column_of_the_wrong_type_is_named_and_compatible_types_pass(tmp_path):
    import pyarrow as pa

    p = _parquet(tmp_path, BASE_COLS | {"max_tokens": ["8", "8"]})
    with pytest.raises(InputFileError, match=rf"{p}, field 'max_tokens': column has Arrow type string, expected int64"):
        load_traffic(p)
    p = _parquet(tmp_path, BASE_COLS | {"max_tokens": [8.0, 8.0]})
    with pytest.raises(InputFileError, match=r"field 'max_tokens': column has Arrow type double"):
        load_traffic(p)
    p = _parquet(tmp_path, BASE_COLS | {"prompt_id": [1, 2]})
    with pytest.raises(InputFileError, match=r"field 'prompt_id': column has Arrow type int64, expected string"):
        load_traffic(p)
    # narrower ints, an integer temperature column and dictionary-encoded strings are fine
    p = _parquet(
        tmp_path,
        BASE_COLS
        | {
            "max_tokens": pa.array([8, 9], pa.int16()),
            "temperature": pa.array([0, 1], pa.int32()),
            "category": pa.array(["c", "d"]).dictionary_encode(),
        },
    )
    rows = load_traffic(p).rows
    assert [(r.max_tokens, r.temperature, r.category) for r in rows] == [(8, 0.0, "c"), (9, 1.0, "d")]


def test_parquet_nulls_name_the_row_and_missing_or_unknown_columns_are_named(tmp_path):
    p = _parquet(tmp_path, BASE_COLS | {"prompt": ["x", None]})
    # prompt is optional in format version 2 (messages may stand instead), so the row has no content
    with pytest.raises(InputFileError, match=rf"{p}, row 2: .*exactly one of the fields prompt .* and messages"):
        load_traffic(p)
    p = _parquet(tmp_path, BASE_COLS | {"max_tokens": [8, None]})
    with pytest.raises(InputFileError, match=rf"{p}, row 2, field 'max_tokens': null value"):
        load_traffic(p)
    p = _parquet(tmp_path, BASE_COLS | {"temperature": [0.0, None]})
    with pytest.raises(InputFileError, match=r"row 2, field 'temperature': null value"):
        load_traffic(p)
    cols = dict(BASE_COLS)
    del cols["max_tokens"]
    with pytest.raises(InputFileError, match=r"field 'max_tokens': missing column"):
        load_traffic(_parquet(tmp_path, cols))
    with pytest.raises(InputFileError, match=r"field 'priority': unknown column"):
        load_traffic(_parquet(tmp_path, BASE_COLS | {"priority": [1, 1]}))


def test_parquet_nan_temperature_and_bad_text_name_the_row(tmp_path):
    p = _parquet(tmp_path, BASE_COLS | {"temperature": [0.0, float("nan")]})
    with pytest.raises(InputFileError, match=r"row 2, field 'temperature': .*finite"):
        load_traffic(p)
    p = _parquet(tmp_path, BASE_COLS | {"prompt": ["x", "   "]})
    with pytest.raises(InputFileError, match=r"row 2, field 'prompt': .*whitespace"):
        load_traffic(p)


def test_parquet_string_that_is_not_utf8_names_the_row(tmp_path):
    import pyarrow as pa

    raw = pa.array([b"ok", b"caf\xe9"], pa.binary())
    bad = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # Arrow does not check on write
    p = _parquet(tmp_path, BASE_COLS | {"prompt": bad})
    with pytest.raises(InputFileError, match=r"row 2, field 'prompt': not UTF-8: byte 0xe9 at byte offset 3"):
        load_traffic(p)
