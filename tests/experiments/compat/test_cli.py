"""``specdec compat`` end to end against fake servers: the run folder, the
manifest's probe bodies, the matrix; and the tokenizer preflight stopping a
run before any request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from click.testing import CliRunner

from specdec.cli.main import main
from specdec.runfolder import read_manifest
from tests.support.compat_server import CompatFake, threaded_pair


def test_compat_on_a_pair_of_urls_writes_cells_manifest_and_matrix(tmp_path):
    # a 30 ms floor under every request: with instant replies, timer noise over 2 repeats can put the
    # stream cell's speed ratio wholly below the degrade margin (CI, 2026-12-03: "degrades")
    base, spec = CompatFake(False, base_s=0.03), CompatFake(True, invalid_json=True, base_s=0.03)
    run_dir = tmp_path / "runs" / "c1"
    with threaded_pair(base, spec) as (b, s):
        result = CliRunner().invoke(
            main,
            [
                "compat",
                "--baseline-url",
                b,
                "--speculative-url",
                s,
                "-o",
                str(run_dir),
                "--probe",
                "json_schema",
                "--probe",
                "stream",
                "--repeats",
                "2",
            ],
        )
    assert result.exit_code == 0, result.output
    rows = pq.read_table(run_dir / "compat.parquet").to_pylist()
    assert [(r["probe"], r["outcome"]) for r in rows] == [("json_schema", "broken"), ("stream", "works")]
    assert all(r["engine"] == "external" and r["spec_method"] == "declared" for r in rows)
    manifest = read_manifest(run_dir)
    assert manifest.kind == "compat" and manifest.finished
    sent = manifest.traffic["probes"]["external"]
    assert [e["probe"] for e in sent] == ["json_schema", "stream"]
    # the bodies the servers received are the ones the manifest records
    assert sent[0]["bodies"][0] in base.bodies and sent[0]["bodies"][0] in spec.bodies
    assert sent[0]["twin"] in base.bodies
    assert "json_schema" in result.output and "broken" in result.output
    assert "outcomes: works 1, degrades 0, broken 1, refused 0, not tested 0, not offered 0" in result.output
    # the marts and the report: the compatibility mart holds the cells, the section opens with the counts
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    mart = con.sql("select probe, outcome, acceptance_rate, plain_acceptance_rate, n from compatibility").fetchall()
    assert sorted(mart) == [("json_schema", "broken", 0.75, 0.75, 8), ("stream", "works", 0.75, 0.75, 8)]
    speed = con.sql(
        "select repeats, speedup_pairs, speedup_ci_low is not null, plain_speedup is not null, "
        "speculative_capture_reconciles, capture_detail from compatibility where probe = 'stream'"
    ).fetchall()
    assert speed == [(2, 2, True, True, None, "not captured")]  # a user's pair: no capture to reconcile
    # the CLI hands the verdict's functions in: every timed feature cell's speed is judged (issue 43, item 4)
    labels = con.sql("select speed_label from compatibility").fetchall()
    assert labels and all(x in {("faster",), ("slower",), ("equivalent",), ("not measured",)} for x in labels)
    assert all(r["speed_label"] is not None and "speed " in r["detail"] for r in rows if r["speedup"] is not None)
    assert (run_dir / "charts" / "compat_matrix.png").is_file()  # the matrix chart
    html = (run_dir / "report.html").read_text()
    section = html[html.index("What works with speculation on this stack") :]
    assert section.index("works 1, degrades 0, broken 1, refused 0, not tested 0, not offered 0") < section.index(
        "json_schema"
    )
    assert "Feature probes&#x27; paired speedups" in section or "Feature probes' paired speedups" in section


def test_compat_against_a_server_that_never_drafts_says_not_tested_in_the_mart_and_the_report(tmp_path):
    """Issue 43: a speculative server whose counters never move got works in every cell."""
    base, spec = CompatFake(False, base_s=0.01), CompatFake(True, no_drafts_with="messages", base_s=0.01)
    run_dir = tmp_path / "runs" / "c2"
    with threaded_pair(base, spec) as (b, s):
        args = ["compat", "--baseline-url", b, "--speculative-url", s, "-o", str(run_dir)]
        result = CliRunner().invoke(main, [*args, "--probe", "json_schema", "--probe", "stream"])
    assert result.exit_code == 0, result.output
    assert "outcomes: works 0, degrades 0, broken 0, refused 0, not tested 2, not offered 0" in result.output
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    mart = con.sql("select probe, outcome, outcome_rank, draft_tokens from compatibility").fetchall()
    assert sorted(mart) == [("json_schema", "not tested", 5, 0), ("stream", "not tested", 5, 0)]
    html = (run_dir / "report.html").read_text()
    section = html[html.index("What works with speculation on this stack") :]
    assert "works 0, degrades 0, broken 0, refused 0, not tested 2, not offered 0" in section
    assert "not tested: valid and identical, but nothing shows that speculation ran" in section


def test_a_planted_tokenizer_mismatch_stops_the_run_before_any_request(tmp_path, model_dir):
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    shutil.copy(Path(model_dir) / "tokenizer.json", target / "tokenizer.json")
    data = json.loads((target / "tokenizer.json").read_text())
    data["added_tokens"].append(
        {
            "id": 49152,
            "content": "<|x|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (draft / "tokenizer.json").write_text(json.dumps(data))
    base, spec = CompatFake(False), CompatFake(True)
    with threaded_pair(base, spec) as (b, s):
        result = CliRunner().invoke(
            main,
            [
                "compat",
                "--baseline-url",
                b,
                "--speculative-url",
                s,
                "-o",
                str(tmp_path / "runs" / "c2"),
                "--draft-model",
                str(draft),
                "--target-model",
                str(target),
            ],
        )
    assert result.exit_code == 1
    assert "vocabulary size: draft 49153, target 49152" in result.output
    assert base.bodies == [] and spec.bodies == []  # nothing was sent
    assert not (tmp_path / "runs").exists()  # nor any folder created


def test_engines_together_is_asked_for_not_the_default(monkeypatch, tmp_path):
    import specdec.cli.compat as cli_compat

    seen = []

    def fake(cfg, echo, **_verdict):
        seen.append(cfg.together)
        raise cli_compat.SpecdecError("stop here")

    monkeypatch.setattr(cli_compat, "run_compat", fake)
    for extra, want in (([], False), (["--engines-together"], True)):
        result = CliRunner().invoke(main, ["compat", "--engine", "both", "-o", str(tmp_path / "r"), *extra])
        assert "stop here" in result.output and seen[-1] is want
    assert "--engines-together" in CliRunner().invoke(main, ["compat", "--help"]).output
