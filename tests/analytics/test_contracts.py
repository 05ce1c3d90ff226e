"""``specdec validate``: the data contracts pass on a clean run and name the
file, row and field of every planted violation.

The run is conftest's tiny run, with the warm-up request given its prefill
row (round 0) so that its round indexes are contiguous. Rows of a Parquet file
count from 0; rows of a traffic file from 1 (JSON Lines: line numbers). great_expectations
is slow to import, so the dirty run is validated once per module.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specdec.analytics.contracts import declared_categories
from specdec.cli.main import main
from specdec.runfolder import capture_dir, round_part_name
from specdec.schemas.arrow import table_from_records, write_parquet_atomic
from specdec.schemas.records import RoundTrace
from tests.support.synthetic_run import (
    failed,
    make_counters,
    make_manifest,
    make_requests,
    make_rounds,
    round_row,
    write_run,
)

WARMUP = "chatcmpl-sd.t.speculative.c0.00000.warmup-deadbeef"


def clean_rounds() -> list[RoundTrace]:
    return [round_row(WARMUP, 2, 0, 0, 0, 0, phase="prefill"), *make_rounds()]


def invoke(*args: str):
    return CliRunner().invoke(main, ["validate", *map(str, args)])


def json_rows(result) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {(r["suite"], r["expectation"]): r for r in rows}


def index_of(rows, engine_id_part: str, rnd: int) -> int:
    return next(i for i, r in enumerate(rows) if engine_id_part in r.engine_request_id and r.round_index == rnd)


def test_import_of_the_cli_does_not_import_great_expectations():
    out = subprocess.run(
        [sys.executable, "-c", "import specdec.cli.main, sys; print('great_expectations' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_declared_categories_list_map_or_absent():
    assert declared_categories(make_manifest()) == ["chat", "code"]
    assert declared_categories(make_manifest(traffic={"categories": {"code": 3, "chat": 1}})) == ["code", "chat"]
    assert declared_categories(make_manifest(traffic={"path": "x.jsonl"})) is None


def test_clean_run_passes_every_expectation_and_writes_nothing(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    run = write_run(
        tmp_path / "run", rounds=clean_rounds(), requests=[*make_requests()[:-1], failed(make_requests()[-1])]
    )
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    r = invoke(run)
    assert r.exit_code == 0, r.output
    assert "FAILED" not in r.output and "ERROR" not in r.output
    passed, total = re.fullmatch(r"(\d+) of (\d+) expectation\(s\) passed", r.stdout.strip().splitlines()[-1]).groups()
    assert passed == total and int(total) >= 20
    rows = json_rows(invoke(run, "--json"))
    assert all(row["success"] and row["unexpected_count"] == 0 for row in rows.values())
    # every suite of the contract ran, on every row of its file
    assert {
        ("rounds", "accepted_le_proposed"),
        ("rounds", "round_index_contiguous"),
        ("requests", "category_declared"),
        ("requests", "failure_has_error_type"),
        ("engine_counters", "run_id_is_manifest_run_id"),
    } <= rows.keys()
    assert rows[("rounds", "accepted_le_proposed")]["rows_checked"] == len(clean_rounds())
    assert list(work.iterdir()) == []  # no gx/ folder, no usage files


@pytest.fixture(scope="module")
def dirty(tmp_path_factory):
    """A run with one violation per contract; returns (run, rows, planted rows)."""
    run = tmp_path_factory.mktemp("dirty")
    rounds = make_rounds()
    spec_code_c1 = "speculative.c1.00000"
    bad = index_of(rounds, spec_code_c1, 1)  # (4, 4) -> accepted 5 of 4 proposed
    rounds[bad] = rounds[bad].model_copy(update={"tokens_accepted": 5})
    spec_code_c2 = "speculative.c2.00000"  # rounds 0..4; drop round 2 -> 0, 1, 3, 4
    del rounds[index_of(rounds, spec_code_c2, 2)]
    gap = index_of(rounds, spec_code_c2, 4)
    rounds.insert(0, round_row(WARMUP, 2, 0, 0, 0, 0, phase="prefill"))
    bad, gap = bad + 1, gap + 1
    twice = index_of(rounds, "baseline.c1.00000", 2)  # rounds 0, 1, 2 -> 0, 1, 2, 2
    rounds.append(rounds[twice])
    requests = make_requests()
    requests[1] = requests[1].model_copy(update={"category": "poetry"})
    requests[2] = requests[2].model_copy(update={"ttft_ms": 5000.0})  # after the end of the stream
    requests[3] = requests[3].model_copy(update={"error_type": "timeout"})  # but success=True
    requests[4] = failed(requests[4])  # a proper failure: breaks nothing
    counters = make_counters()
    counters[5] = counters[5].model_copy(update={"run_id": "another-run"})
    write_run(run, counters, requests=requests, rounds=rounds)
    result = invoke(run, "--json")
    return run, json_rows(result), result.exit_code, {"bad": bad, "gap": gap, "twice": [twice, len(rounds) - 1]}


def test_planted_violations_fail_exactly_their_expectations(dirty):
    _, rows, code, _ = dirty
    assert code == 1
    failing = {k for k, r in rows.items() if not r["success"]}
    assert failing == {
        ("rounds", "accepted_le_proposed"),
        ("rounds", "round_index_contiguous"),
        ("requests", "category_declared"),
        ("requests", "e2e_ge_ttft_on_success"),
        ("requests", "success_has_no_error_type"),
        ("engine_counters", "run_id_is_manifest_run_id"),
    }
    assert rows[("rounds", "round_index_contiguous")]["unexpected_count"] == 3  # the gap + the repeated index twice
    assert all(rows[k]["unexpected_count"] == 1 for k in failing - {("rounds", "round_index_contiguous")})
    assert not any(r["error"] for r in rows.values())
    assert {r["row_base"] for r in rows.values()} == {0}


def test_each_violation_names_file_row_and_values(dirty):
    run, rows, _, planted = dirty
    (ex,) = rows[("rounds", "accepted_le_proposed")]["examples"]
    assert (Path(ex["file"]).name, ex["row"]) == ("rounds.parquet", planted["bad"])
    assert ex["values"]["tokens_accepted"] == 5 and ex["values"]["tokens_proposed"] == 4
    twice_a, gap, twice_b = rows[("rounds", "round_index_contiguous")]["examples"]
    assert [twice_a["row"], twice_b["row"]] == planted["twice"]
    assert twice_a["values"]["round_index"] == twice_b["values"]["round_index"] == 2
    assert gap["row"] == planted["gap"] and gap["values"]["round_index"] == 4
    assert "speculative.c2.00000" in gap["values"]["engine_request_id"]
    (ex,) = rows[("requests", "category_declared")]["examples"]
    assert (Path(ex["file"]).name, ex["row"], ex["values"]["category"]) == ("requests.parquet", 1, "poetry")
    (ex,) = rows[("requests", "success_has_no_error_type")]["examples"]
    assert (ex["row"], ex["values"]["error_type"]) == (3, "timeout")
    (ex,) = rows[("engine_counters", "run_id_is_manifest_run_id")]["examples"]
    assert (Path(ex["file"]).name, ex["row"], ex["values"]["run_id"]) == ("engine_counters.parquet", 5, "another-run")


def test_table_output_names_the_failures(dirty):
    run, _, _, planted = dirty
    r = invoke(run)
    assert r.exit_code == 1
    assert f"rounds.parquet, row {planted['bad']}, field 'tokens_proposed, tokens_accepted'" in r.output
    assert f"rounds.parquet, row {planted['gap']}, field 'round_index'" in r.output
    assert "requests.parquet, row 1, field 'category': " in r.output and "'poetry'" in r.output
    assert "engine_counters.parquet, row 5, field 'run_id'" in r.output
    assert "FAILED" in r.output and "passed" in r.output


def test_part_files_rows_count_within_each_file(tmp_path):
    run = write_run(tmp_path, rounds=clean_rounds())
    rows = clean_rounds()
    rows[-1] = rows[-1].model_copy(update={"tokens_accepted": 9})
    (run / "rounds.parquet").unlink()
    capture_dir(run).mkdir()
    write_parquet_atomic(table_from_records(RoundTrace, rows[:10]), capture_dir(run) / round_part_name("1-a", 0))
    write_parquet_atomic(table_from_records(RoundTrace, rows[10:]), capture_dir(run) / round_part_name("1-a", 1))
    r = invoke(run, "--json")
    assert r.exit_code == 1
    (ex,) = json_rows(r)[("rounds", "accepted_le_proposed")]["examples"]
    assert (Path(ex["file"]).name, ex["row"]) == (round_part_name("1-a", 1), len(rows) - 11)


def test_unreadable_parquet_is_exit_2_naming_the_file(tmp_path):
    run = write_run(tmp_path, rounds=clean_rounds())
    (run / "requests.parquet").write_bytes(b"PAR1 this is not parquet")
    r = invoke(run)
    assert r.exit_code == 2
    assert "requests.parquet" in r.output and "not a readable Parquet file" in r.output
    assert "Traceback" not in r.output


def test_missing_run_folder_or_manifest_is_exit_2(tmp_path):
    r = invoke(tmp_path / "nowhere")
    assert r.exit_code == 2 and "no such run folder" in r.output
    r = invoke(tmp_path)
    assert r.exit_code == 2 and "manifest.json" in r.output


TRAFFIC = [
    {"prompt_id": "a", "category": "code", "prompt": "hi", "max_tokens": 8, "temperature": 0.0},
    {"prompt_id": "b", "category": "chat", "prompt": "hi", "max_tokens": 0},
    {"prompt_id": "c", "category": "chat", "prompt": "hi", "max_tokens": 8, "temperature": 2.5},
    {"prompt_id": "d", "category": "", "prompt": "hi", "max_tokens": 8},
    {"prompt_id": "a", "category": "chat", "prompt": "hi", "max_tokens": 8},
]


def test_traffic_file_violations_are_named_by_line(tmp_path):
    path = tmp_path / "mix.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in TRAFFIC) + "\n")
    r = invoke(path, "--json")
    assert r.exit_code == 1, r.output
    rows = json_rows(r)
    failing = {k[1]: [(ex["row"]) for ex in v["examples"]] for k, v in rows.items() if not v["success"]}
    assert failing == {
        "max_tokens_positive": [2],
        "temperature_0_to_2": [3],
        "category_non_empty": [4],
        "prompt_id_unique": [1, 5],
        "row_schema": [2, 3, 4],
    }
    assert rows[("traffic", "max_tokens_present")]["success"]
    assert {r["row_base"] for r in rows.values()} == {1}
    text = invoke(path).output
    assert f"{path}, row 2, field 'max_tokens'" in text


def test_clean_traffic_file_passes(tmp_path):
    path = tmp_path / "mix.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in TRAFFIC[:1]) + "\n")
    r = invoke(path)
    assert r.exit_code == 0, r.output
    assert "FAILED" not in r.output


def test_an_empty_record_file_passes_with_no_rows_checked(tmp_path):
    r = invoke(write_run(tmp_path, rounds=[]), "--json")
    assert r.exit_code == 0, r.output
    rounds = [row for (suite, _), row in json_rows(r).items() if suite == "rounds"]
    assert rounds and all(row["success"] and row["rows_checked"] == 0 for row in rounds)


def test_a_check_that_cannot_run_or_a_crash_is_exit_2(tmp_path, monkeypatch):
    from specdec.analytics import contracts

    broken = contracts.ContractResult(
        "rounds", "accepted_le_proposed", ["tokens_proposed"], False, 0, 3, error="KeyError: 'tokens_proposed'"
    )
    monkeypatch.setattr(contracts, "validate_path", lambda path: [broken])
    r = invoke(tmp_path)
    assert r.exit_code == 2 and "could not run" in r.output and "KeyError" in r.output

    def crash(path):
        raise RuntimeError("boom")

    monkeypatch.setattr(contracts, "validate_path", crash)
    r = invoke(tmp_path)
    assert r.exit_code == 2 and "RuntimeError: boom" in r.output and "Traceback" not in r.output
