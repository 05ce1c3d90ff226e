"""``specdec plan`` through click: options, outputs, the routing rules export, the SLO and the mix."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specdec.capture.proxy.rules import load_rules
from specdec.cli.plan import plan_command
from tests.support.plan_run import write_plan_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # speculative TTFT at c4 is 50 ms (e2e 5000), else 10 ms
    return write_plan_run(
        tmp_path_factory.mktemp("plan"),
        e2e=lambda arm, p, level, r: 5000.0 if (arm, level) == ("speculative", 4) else 1000.0,
    )


def _plan(run_dir, tmp_path, *args):
    out = tmp_path / "plan"
    res = CliRunner().invoke(plan_command, [str(run_dir), "-o", str(out), "--replicates", "40", *args])
    assert res.exit_code == 0, res.output
    return json.loads((out / "plan.json").read_text()), out, res.output


def test_plan_writes_every_file_and_prints_what_to_deploy(run_dir, tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"rules": [{"category": "code", "content": "def "}, {"category": "chat", "route": "/v1/.*"}]})
    )
    plan, out, text = _plan(run_dir, tmp_path, "--k", "0,1,2", "--rules", str(rules))
    assert plan["ks"] == [0, 1, 2]
    assert plan["in_sample_check"]["cells"] == [] and "not computed" in plan["in_sample_check"]["what"]
    assert "What to deploy" in text and "k_per_band_with_fallback" in text
    mapped = json.loads((out / "routing_rules.json").read_text())
    pools = plan["exports"]["routing"]["pools"]
    assert [r["category"] for r in mapped["rules"]] == [pools["code"], pools["chat"]]
    load_rules(out / "routing_rules.json")  # the proxy reads it as it is
    cfg = json.loads((out / "vllm_speculative_config.json").read_text())
    assert cfg is None or cfg["num_speculative_tokens"] == max(
        s[2] for s in cfg["num_speculative_tokens_per_batch_size"]
    )


def test_k_above_the_captured_one_is_not_predicted(run_dir, tmp_path):
    plan, _, text = _plan(run_dir, tmp_path, "--k", "0..6")
    assert plan["ks"] == [0, 1, 2, 3, 4]
    assert "k = 5, 6 not predicted" in text


def test_slo_turns_speculation_off_where_the_measured_ttft_broke_it(run_dir, tmp_path):
    plan, _, _ = _plan(run_dir, tmp_path, "--slo-ttft-p95-ms", "20")
    for cell in plan["cells"]:
        assert cell["slo_excluded_speculation"] == (cell["level"] == 4)
        if cell["level"] == 4:
            assert cell["recommended_k"] == 0 and cell["speedup"] == 1.0
    fb = plan["policies"][2]["bands"][-1]
    assert set(fb["k"].values()) == {0} and fb["gain"] == pytest.approx(1.0)


def test_mix_weights_by_output_tokens_and_moves_the_gain(run_dir, tmp_path):
    code, _, _ = _plan(run_dir, tmp_path, "--mix", "code=1.0")
    chat, _, _ = _plan(run_dir, tmp_path, "--mix", "code=0.2,chat=0.8")
    assert code["mix"]["token_weights"] == {"chat": 0.0, "code": 1.0}
    assert chat["mix"]["token_weights"]["chat"] == pytest.approx(0.8)
    # code accepts more than chat (tests/support/plan_run.py), so its plan gains more
    assert code["policies"][1]["overall"]["gain"] > chat["policies"][1]["overall"]["gain"]


def test_a_mix_naming_an_unknown_category_is_refused(run_dir, tmp_path):
    res = CliRunner().invoke(plan_command, [str(run_dir), "-o", str(tmp_path / "p"), "--mix", "math=1.0"])
    assert res.exit_code != 0 and "math" in res.output


def test_plan_from_a_database_built_already_does_not_rebuild(run_dir, tmp_path):
    first, _, _ = _plan(run_dir, tmp_path)  # builds run_dir/specdec.duckdb
    db = run_dir / "specdec.duckdb"
    built = db.stat().st_mtime_ns
    again, _, _ = _plan(run_dir, tmp_path / "again", "--db", str(db))
    assert db.stat().st_mtime_ns == built
    assert again["cells"] == first["cells"]


def test_a_database_built_by_other_sql_models_is_refused_by_name(run_dir, tmp_path):
    """``--db`` reads the marts with this specdec's queries: a database another version built
    (here, one model's SQL changed in its ``sql_models``, as a version that renamed a column
    leaves it) is refused, naming the file and the model, and nothing is planned."""
    import duckdb

    _plan(run_dir, tmp_path)  # builds run_dir/specdec.duckdb
    db = run_dir / "specdec.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("update sql_models set sql = sql || ' -- older' where name = 'speedup'")
    out = tmp_path / "refused"
    res = CliRunner().invoke(plan_command, [str(run_dir), "-o", str(out), "--db", str(db)])
    assert res.exit_code != 0 and not out.exists()
    assert f"{db}: built by another version of specdec (1 of its" in res.output and "speedup first" in res.output
    assert "Traceback" not in res.output
