"""``specdec-capture reconcile`` (``selfcheck`` until 2026-12-07): listed under its name, the old
name hidden and deprecated with a message; without --dir it leaves no folder behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

from click.testing import CliRunner

from specdec.cli import capture as capture_cli


def test_reconcile_is_listed_and_selfcheck_is_its_hidden_deprecated_old_name():
    listed = CliRunner().invoke(capture_cli.main, ["--help"]).output
    assert " reconcile " in listed and "selfcheck" not in listed
    old = CliRunner().invoke(capture_cli.main, ["selfcheck", "--help"]).output
    assert "DEPRECATED" in old.upper() and "specdec-capture reconcile" in old


def test_without_a_folder_the_captured_rows_go_to_one_that_is_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where TemporaryDirectory makes its folder
    seen = []

    def fake(out_dir, model, spec_config, dtype, max_tokens):
        seen.append(Path(out_dir))
        assert Path(out_dir).is_dir() and Path(out_dir).parent == tmp_path
        return {"match": True}

    monkeypatch.setattr(capture_cli, "run_reconcile", fake)
    result = CliRunner().invoke(capture_cli.main, ["reconcile", "--model", "/m"])
    assert result.exit_code == 0, result.output
    assert seen and not seen[0].exists() and list(tmp_path.iterdir()) == []
