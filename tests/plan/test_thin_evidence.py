"""Thin evidence gets no k > 0 (issue 42, item 3). A category with one prompt (every request of it the
same prompt, at each level and repeat) got k = 4 with a tight interval: the bootstrap resamples the
same request and sees no request-to-request variation. A run of one repeat has no noise estimate,
so no prediction interval: no recommendation. In both the cell says why, and the page shows it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from specdec.cli.plan import plan_command
from tests.support import plan_run
from tests.support.synthetic_run import write_run

CODE_1 = 1  # code-1's index in the prompts: dropped, code keeps one prompt (code-0)


def _write(run_dir, keep_request, keep_round, keep_counter=lambda c: True):
    arms = plan_run.CLASSIC
    run_dir.mkdir(parents=True)
    return write_run(
        run_dir,
        [c for c in plan_run.make_counters(arms) if keep_counter(c)],
        requests=[r for r in plan_run.make_requests(arms, lambda *a: 1000.0) if keep_request(r)],
        rounds=[r for r in plan_run.make_rounds(arms) if keep_round(r)],
        manifest=plan_run._manifest(arms),
    )


def _plan(run_dir, out):
    res = CliRunner().invoke(plan_command, [str(run_dir), "-o", str(out), "--replicates", "40"])
    assert res.exit_code == 0, res.output
    return json.loads((out / "plan.json").read_text()), (out / "plan.html").read_text()


def test_a_category_of_one_prompt_gets_no_speculation_and_says_why(tmp_path):
    run = _write(
        tmp_path / "run",
        keep_request=lambda r: r.prompt_id != "code-1",
        keep_round=lambda r: f".{CODE_1:05d}-" not in r.engine_request_id,
    )
    plan, html = _plan(run, tmp_path / "plan")
    code = [c for c in plan["cells"] if c["category"] == "code"]
    assert code and all(c["recommended_k"] == 0 and c["deployed_k"] == 0 for c in code)
    assert all("1 prompt" in c["thin_evidence"] and c["decision"].startswith("off: thin evidence") for c in code)
    assert all(c["thin_evidence"] is None for c in plan["cells"] if c["category"] == "chat")
    assert "1 prompt" in html
    # the predictions stay on the page, with their intervals
    assert all(b["prediction_low"] is not None for c in code for b in c["by_k"])


def test_one_repeat_has_no_prediction_interval_and_no_recommendation(tmp_path):
    run = _write(
        tmp_path / "run",
        keep_request=lambda r: r.repeat == 0,
        keep_round=lambda r: ".r1." not in r.engine_request_id,
        keep_counter=lambda c: c.repeat == 0,
    )
    plan, html = _plan(run, tmp_path / "plan")
    assert plan["cells"] and all(c["recommended_k"] == 0 for c in plan["cells"])
    assert all("no prediction interval" in c["thin_evidence"] for c in plan["cells"])
    assert all(c["prediction_low"] is None for c in plan["cells"])
    assert "no prediction interval" in html
