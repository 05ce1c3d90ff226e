"""The data dictionary covers every record field and every SQL model, and the
committed copy (docs/data-dictionary.md) is what the code generates today."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from specdec.analytics.docs import render, sql_header
from specdec.analytics.sql_models import discover
from specdec.cli.main import main
from specdec.runfolder import RECORD_FILES
from specdec.schemas.records import RunManifest, TrafficRow

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_and_every_model_is_described():
    text = render()
    for model in [rec.record() for rec in RECORD_FILES] + [TrafficRow, RunManifest]:
        for name in model.model_fields:
            assert f"| `{name}` |" in text, (model.__name__, name)
    for m in discover():
        assert f"### `{m.name}`" in text
        header = sql_header(m.sql)
        assert header.startswith("Grain:"), m.name  # the prose under the parsed header states the grain
        assert header in text
        # the parsed fields are printed from the header, not from prose
        assert f"kind `{m.header.kind}` · grain `({', '.join(m.header.grain)})`" in text, m.name
    assert "Annotated" not in text and "FieldInfo" not in text  # types are readable


def test_the_committed_copy_is_current():
    committed = (ROOT / "docs" / "data-dictionary.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/data-dictionary.md is stale: run `specdec analytics docs`"


def test_cli_writes_it(tmp_path):
    out = tmp_path / "dd.md"
    result = CliRunner().invoke(main, ["analytics", "docs", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == render()
