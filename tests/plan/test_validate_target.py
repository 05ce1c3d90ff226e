"""`specdec plan --validate` replays the system the plan is about (issue 42, item 4): a run recorded
against external servers is validated against the servers given by --baseline-url/--speculative-url
and refused by name without them, never replayed on the embedded engine instead; a validation run
in which every request failed is "not validated", with the reason, and the command exits non-zero.
No server is started: the replay is replaced by a synthetic run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specdec.analytics.plan.run import PlanConfig, make_plan
from specdec.cli.plan import plan_command
from specdec.cli.plan_validate import validate_against, validation_target
from specdec.errors import SpecdecError
from tests.support.fake_server import FakeVllm, threaded
from tests.support.plan_run import (
    CATEGORY,
    CLASSIC,
    _manifest,
    make_counters,
    make_requests,
    make_rounds,
    write_plan_run,
    write_validation_run,
)
from tests.support.synthetic_run import failed, write_run

URLS = ["--baseline-url", "http://10.0.0.1:8000", "--speculative-url", "http://10.0.0.2:8000"]


def _external(run_dir, capture_dir):
    """Make ``run_dir``'s manifest say what a replay against external servers writes (replay/manifest.py)."""
    path = run_dir / "manifest.json"
    m = json.loads(path.read_text())
    m["engine"] = {"name": "external", "version": None, "adapter": "vllm"}
    m["dtype"] = "unknown"
    m["capture"] = {"source": "directory", "path": str(capture_dir)}
    m["schedule"] = {"repeats": 2, "restart_servers": "never (external servers)", "lossless_pass": False, "samples": 0}
    m["timeouts"] = {"connect_s": 2.0, "request_s": 2.0}
    for arm, url in zip(m["arms"], ("http://gpu-a:8000", "http://gpu-b:8000")):
        arm.update(server_args=[], endpoint=url)
        arm["speculative_config_source"] = "declared" if arm["speculative_config"] else "none"
    path.write_text(json.dumps(m))
    return run_dir


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    root = tmp_path_factory.mktemp("external")
    run = write_validation_run(root)
    (root / "capture").mkdir()
    return _external(run, root / "capture")


@pytest.fixture
def no_engine(monkeypatch):
    """Any step towards the embedded engine (or a replay at all) is recorded, and stands in for nothing."""
    calls = []

    def record(name):
        def fake(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} called")

        return fake

    monkeypatch.setattr("specdec.model.prepare_model", record("prepare_model"))
    monkeypatch.setattr("specdec.model.find_gguf", record("find_gguf"))
    monkeypatch.setattr("specdec.replay.experiment.run_replay", record("run_replay"))
    return calls


@pytest.mark.parametrize("given", [[], URLS[:2], URLS[2:]])
def test_an_external_run_without_both_urls_is_refused_by_name(external, tmp_path, no_engine, monkeypatch, given):
    planned = []
    monkeypatch.setattr("specdec.analytics.plan.run.make_plan", lambda *a, **k: planned.append(a))
    out = tmp_path / "plan"
    res = CliRunner().invoke(plan_command, [str(external), "-o", str(out), "--validate", *given])
    assert res.exit_code != 0
    assert "recorded against external servers" in res.output
    assert "--baseline-url and --speculative-url" in res.output
    assert "http://gpu-a:8000" in res.output and "http://gpu-b:8000" in res.output  # the servers it was about
    assert "does not fall back to the embedded engine" in res.output
    assert no_engine == [] and planned == [] and not out.exists()  # refused before planning or starting anything


def test_an_embedded_run_refuses_urls_and_urls_need_validate(tmp_path, no_engine):
    (tmp_path / "run").mkdir()
    run = write_plan_run(tmp_path / "run")
    with pytest.raises(SpecdecError, match="recorded on the embedded engine"):
        validation_target(run, ("http://a:1", "http://b:2"))
    assert validation_target(run) == (None, None)
    res = CliRunner().invoke(plan_command, [str(run), "-o", str(tmp_path / "plan"), *URLS])
    assert res.exit_code == 2 and "give --validate" in res.output


def test_an_external_run_is_replayed_against_the_servers_given(external, tmp_path, no_engine, monkeypatch):
    plan = make_plan(external, PlanConfig(replicates=40))
    seen = {}

    def fake_replay(cfg):
        seen["cfg"] = cfg
        (tmp_path / "replayed").mkdir()
        speedup = {(c["category"], c["level"]): b["speedup"] for c in plan["cells"] for b in c["by_k"] if b["k"] == 4}
        e2e = lambda arm, prompt, level, repeat: (  # noqa: E731
            1000.0 if arm == "baseline" else 1000.0 / speedup[(CATEGORY[prompt], level)]
        )
        return write_plan_run(tmp_path / "replayed", e2e=e2e, arms=CLASSIC)

    monkeypatch.setattr("specdec.replay.experiment.run_replay", fake_replay)
    out = tmp_path / "plan"
    res = CliRunner().invoke(
        plan_command,
        [str(external), "-o", str(out), "--replicates", "40", "--validate", "--runs-dir", str(tmp_path), *URLS],
    )
    assert res.exit_code == 0, res.output
    assert no_engine == []  # no model prepared, no embedded server
    cfg = seen["cfg"]
    assert cfg.external and (cfg.baseline_url, cfg.speculative_url) == ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    assert cfg.named_arms is None and cfg.arms == ["baseline", "speculative"]
    assert cfg.speculative_config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    assert cfg.engine == "vllm" and cfg.levels == [1, 2, 4] and cfg.repeats == 2
    assert cfg.capture_dir == external.parent / "capture"
    result = json.loads((out / "plan_validation.json").read_text())
    assert result["ks_validated"] == [4] and result["requests"]["requests_ok"] > 0
    assert result["outcome"] in ("validated", "failed") and result["reason"] is None


def _all_failed(run_dir):
    reqs = [failed(r, message="HTTP 500: upstream down") for r in make_requests(CLASSIC, lambda *a: 1000.0)]
    return write_run(
        run_dir, make_counters(CLASSIC), requests=reqs, rounds=make_rounds(CLASSIC), manifest=_manifest(CLASSIC)
    )


def test_a_validation_whose_every_request_failed_is_not_validated(external, tmp_path):
    plan = make_plan(external, PlanConfig(replicates=40))
    out = validate_against(plan, _all_failed(tmp_path))
    n = out["requests"]["requests"]
    assert n == len(make_requests(CLASSIC, lambda *a: 1000.0)) and out["requests"]["requests_ok"] == 0
    assert out["outcome"] == "not validated" and not out["passed"]
    assert out["reason"].startswith(f"every one of its {n} requests failed (http_status: {n}); first: ")
    assert "HTTP 500: upstream down" in out["reason"]


def test_the_command_exits_non_zero_when_every_request_failed(external, tmp_path):
    (tmp_path / "replayed").mkdir()
    replayed = _all_failed(tmp_path / "replayed")
    out = tmp_path / "plan"
    res = CliRunner().invoke(
        plan_command, [str(external), "-o", str(out), "--replicates", "40", "--validate-with", str(replayed)]
    )
    assert res.exit_code == 1, res.output
    assert "Error: not validated against" in res.output and "requests failed" in res.output
    written = json.loads((out / "plan.json").read_text())  # the plan is still written, and says why
    assert written["validated"] is False and written["validation"].startswith("not validated against")
    assert "every one of its" in written["validation"]
    assert json.loads((out / "plan_validation.json").read_text())["outcome"] == "not validated"
    html = (out / "plan.html").read_text()
    assert "Not validated against" in html and "every one of its" in html


class _WarmThenDown(FakeVllm):
    """Answers its first ``ok`` chat requests (the warm-up), then HTTP 500 to every one."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok

    async def chat(self, request):
        self.status = 200 if len(self.request_ids) < self.ok else 500
        return await super().chat(request)


def test_a_replay_against_servers_that_fail_every_request_is_not_validated(external, tmp_path, monkeypatch):
    """The whole path with the replay itself (no engine): the external servers given (fakes) serve
    the warm-up and then fail every request; the plan is written, not validated, and the command
    exits 1 naming why. The embedded engine is never prepared."""
    for name in ("prepare_model", "find_gguf"):
        monkeypatch.setattr(f"specdec.model.{name}", lambda *a, **k: pytest.fail("the embedded engine was prepared"))
    baseline, speculative = _WarmThenDown(ok=1), _WarmThenDown(ok=1)
    out = tmp_path / "plan"
    with threaded(baseline, speculative) as (b, s):
        res = CliRunner().invoke(
            plan_command,
            [str(external), "-o", str(out), "--replicates", "40", "--validate", "--runs-dir", str(tmp_path / "runs")]
            + ["--baseline-url", b, "--speculative-url", s],
        )
    assert res.exit_code == 1, res.output
    assert len(baseline.request_ids) > 1 and len(speculative.request_ids) > 1  # the servers given were replayed
    result = json.loads((out / "plan_validation.json").read_text())
    assert result["outcome"] == "not validated" and result["requests"]["requests_ok"] == 0
    n = result["requests"]["requests"]
    assert n == 2 * 3 * 2  # two arms, three levels, two repeats of the one traffic row
    assert result["reason"].startswith(f"every one of its {n} requests failed (http_status: {n}); first: ")
    assert "HTTP 500" in result["reason"] and "Error: not validated against" in res.output
    assert json.loads((out / "plan.json").read_text())["validated"] is False
