"""A manifest is read within bounds (issue 24, case 9 and the 50 MB note):
nested 200,000 deep, or holding one 50 MB string, it gives a named error
(file and field) from `specdec analytics build`, `specdec report` and
`specdec validate`, never a RecursionError traceback, and the big string is
neither printed nor written into a report. At the bounds it still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specdec.cli.main import main
from specdec.errors import InputFileError
from specdec.runfolder import (
    MANIFEST,
    MANIFEST_MAX_BYTES,
    MANIFEST_MAX_DEPTH,
    MANIFEST_MAX_STRING,
    REPORT,
    read_manifest,
)
from tests.support.synthetic_run import write_run

DEEP = 200_000
BIG = 50 * 10**6


def _with_field(run_dir: Path, key: str, raw_json: str) -> Path:
    """Rewrite the run's manifest with ``traffic[key]`` set to ``raw_json`` (JSON text, spliced in)."""
    path = run_dir / MANIFEST
    data = json.loads(path.read_text())
    data["traffic"] = {**data["traffic"], key: "@@"}
    path.write_text(json.dumps(data).replace('"@@"', raw_json))
    return path


@pytest.fixture
def deep_run(tmp_path):
    (tmp_path / "deep").mkdir()
    run_dir = write_run(tmp_path / "deep")
    _with_field(run_dir, "curve", "[" * DEEP + "]" * DEEP)
    return run_dir


@pytest.fixture
def big_run(tmp_path):
    (tmp_path / "big").mkdir()
    run_dir = write_run(tmp_path / "big")
    _with_field(run_dir, "path", '"' + "A" * BIG + '"')
    return run_dir


def test_a_manifest_nested_200000_deep_is_a_named_error(deep_run):
    with pytest.raises(InputFileError) as exc:
        read_manifest(deep_run)
    msg = str(exc.value)
    assert msg.startswith(f"{deep_run / MANIFEST}, field 'traffic.curve.0.0.0.0.0.0.…': ")
    assert f"nested more than {MANIFEST_MAX_DEPTH} deep" in msg


def test_a_50_mb_string_is_a_named_error_that_does_not_show_it(big_run):
    with pytest.raises(InputFileError) as exc:
        read_manifest(big_run)
    msg = str(exc.value)
    assert msg.startswith(f"{big_run / MANIFEST}, field 'traffic.path': a string of {BIG:,} characters")
    assert len(msg) < 500 and "AAAA" not in msg


@pytest.mark.parametrize("command", [["analytics", "build"], ["report"], ["validate"]])
@pytest.mark.parametrize("case", ["deep_run", "big_run"])
def test_the_commands_name_the_file_and_field(command, case, request):
    run_dir = request.getfixturevalue(case)
    r = CliRunner().invoke(main, [*command, str(run_dir)])
    assert r.exit_code == (2 if command == ["validate"] else 1), r.output  # validate: 2, the file is invalid
    assert "Traceback" not in r.output and "RecursionError" not in r.output
    assert str(run_dir / MANIFEST) in r.output and "field 'traffic." in r.output
    assert len(r.output) < 5000 and "AAAA" not in r.output
    assert not (run_dir / REPORT).exists()


def test_a_manifest_at_the_bounds_still_reads(tmp_path):
    run_dir = write_run(tmp_path)
    depth = MANIFEST_MAX_DEPTH - 2  # the manifest object and traffic hold it
    _with_field(run_dir, "curve", "[" * depth + "]" * depth)
    _with_field(run_dir, "path", json.dumps("p" * MANIFEST_MAX_STRING))
    manifest = read_manifest(run_dir)
    assert len(manifest.traffic["path"]) == MANIFEST_MAX_STRING


def test_a_manifest_too_large_in_all_names_its_largest_field(tmp_path):
    run_dir = write_run(tmp_path)
    many = json.dumps(["x" * 1000] * (MANIFEST_MAX_BYTES // 1000 + 10))
    path = _with_field(run_dir, "categories_seen", many)
    with pytest.raises(InputFileError) as exc:
        read_manifest(run_dir)
    msg = str(exc.value)
    assert msg.startswith(
        f"{path}, field 'traffic': {path.stat().st_size:,} bytes; a manifest holds at most {MANIFEST_MAX_BYTES:,}"
    )
