"""One run, two engines (issue 9): four named arms on the bundled mix, vLLM CPU
none and ngram, llama.cpp none and ngram-mod (``specdec demo --engine both``'s
arms), one level, one repeat. Each engine's ngram arm is measured against its
own plain arm: two comparisons, each analysed as its own run, each
reconciling with its own engine's counters, and a report that puts them side
by side. The vLLM arms are served by the session's shared pair (``vllm_pair``:
none and ngram, float32, as the run's own servers would be); the two llama.cpp
servers are started and stopped by the run's real start-up path, beside them
(issue 40: fresh vLLM servers are started by test_aa_e2e's restart and by
stability's test; here they added about 45 s of start-up)."""

from __future__ import annotations

import duckdb
import pytest

pytestmark = [pytest.mark.engine, pytest.mark.llama_cpp]


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_dir, llama_server_binary, vllm_pair):
    # the vLLM arms on the shared pair; the llama.cpp arms' servers are the run's own (module docstring)
    from specdec.analytics.report.write import write_report
    from specdec.cli.main import BOTH_ENGINES_ARMS
    from specdec.replay.config import ReplayConfig
    from specdec.replay.experiment import run_replay
    from specdec.traffic.io import BUNDLED
    from tests.support.engine_servers import embedded_as

    cfg = ReplayConfig(
        traffic=BUNDLED,
        runs_dir=tmp_path_factory.mktemp("runs"),
        run_id="both",
        named_arms=list(BOTH_ENGINES_ARMS),
        dtype="float32",  # vLLM's, as the shared pair serves (the product's default is bfloat16)
        levels=[2],
        requests_per_level=3,  # 1 prompt per category (6 before: issue 40, 148 s -> 87 s alone with the pair)
        max_tokens=32,  # 48 before
        warmup_requests=1,
        repeats=1,  # the repeats' schedule and intervals are the other engine tests' (2 before: issue 40)
        restart_servers="never",
        progress=False,
    )
    with embedded_as(vllm_pair):
        run_dir = run_replay(cfg)
    report, summary = write_report(run_dir)
    return run_dir, report, summary


def _query(run_dir, sql: str) -> list[tuple]:
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_manifest_names_each_arm_and_each_comparison_differs_in_speculation_only(run):
    from specdec.runfolder import read_manifest

    m = read_manifest(run[0])
    assert m.finished and m.engine["name"] == "mixed" and {"vllm", "llama.cpp"} <= set(m.engine)
    assert set(m.engines) == {"vllm", "llama.cpp"} and m.engines["llama.cpp"]["model"].endswith(".gguf")
    assert m.engines["vllm"]["dtype"] in m.dtype and m.engines["vllm"]["model"] in m.model
    assert [(a.name, a.engine, a.speculative_config is not None) for a in m.arms] == [
        ("vllm-none", "vllm", False),
        ("vllm-ngram", "vllm", True),
        ("llama-none", "llama.cpp", False),
        ("llama-ngram", "llama.cpp", True),
    ]
    assert {d.split(":")[0] for d in m.arm_difference} == {"vllm-ngram vs vllm-none", "llama-ngram vs llama-none"}
    llama = [d for d in m.arm_difference if d.startswith("llama-ngram")]
    assert llama == ["llama-ngram vs llama-none: --spec-type ngram-mod"]
    assert all(
        "speculative-config" in d or "per-request-spec-decode-metrics" in d
        for d in m.arm_difference
        if d.startswith("vllm-ngram")
    )
    assert m.capture["source"] == "embedded" and m.capture["arms_without_rounds"] == ["llama-none", "llama-ngram"]


def test_each_comparison_is_a_run_that_reconciles_with_its_own_engine(run):
    run_dir = run[0]
    assert _query(run_dir, "select run_id from stg_manifest order by 1") == [
        ("both/llama-ngram",),
        ("both/vllm-ngram",),
    ]
    assert _query(
        run_dir,
        "select run_id, arm, arm_name, count(*) filter (where success), count(*) "
        "from stg_requests group by all order by all",
    ) == [
        ("both/llama-ngram", "baseline", "llama-none", 3, 3),
        ("both/llama-ngram", "speculative", "llama-ngram", 3, 3),
        ("both/vllm-ngram", "baseline", "vllm-none", 3, 3),
        ("both/vllm-ngram", "speculative", "vllm-ngram", 3, 3),
    ]
    # per-request stats against each engine's own counters: exact for both
    totals = _query(
        run_dir,
        "select run_id, tokens_proposed, diff_proposed, diff_accepted from acceptance_requests "
        "where arm = 'speculative' and category = '(all)' order by 1",
    )
    assert [t[0] for t in totals] == ["both/llama-ngram", "both/vllm-ngram"]
    assert all(t[1] > 0 and t[2] == 0 and t[3] == 0 for t in totals), totals
    # the captured rounds are vLLM's only, and reconcile exactly with its counters
    assert {r[0] for r in _query(run_dir, "select run_id from acceptance")} == {"both/vllm-ngram"}
    rec = _query(
        run_dir,
        "select arm, diff_proposed, diff_accepted from reconciliation "
        "where run_id = 'both/vllm-ngram' and arm = 'speculative'",
    )
    assert rec and all(p == 0 and a == 0 for _, p, a in rec), rec
    # the lossless pass ran on every arm (llama.cpp's too, issue 43), each comparison on its own pairs
    assert _query(run_dir, "select distinct run_id, arm_name from stg_greedy_checks order by 1, 2") == [
        ("both/llama-ngram", "llama-ngram"),
        ("both/llama-ngram", "llama-none"),
        ("both/vllm-ngram", "vllm-ngram"),
        ("both/vllm-ngram", "vllm-none"),
    ]
    assert _query(run_dir, "select bool_and(success) from stg_greedy_checks") == [(True,)]
    pairs = _query(run_dir, "select run_id, count(*) from int_greedy_pairs group by 1 order by 1")
    assert pairs == [("both/llama-ngram", 3), ("both/vllm-ngram", 3)], pairs


def test_the_report_shows_both_engines_side_by_side(run):
    run_dir, report, summary = run
    page = report.read_text()
    assert "2 comparisons side by side" in page
    assert 'href="report-vllm-ngram.html"' in page and 'href="report-llama-ngram.html"' in page
    assert "no per-round data for this engine" in page  # llama.cpp's acceptance length
    for arm in ("vllm-ngram", "llama-ngram"):
        assert f"{arm} against" in (run_dir / f"report-{arm}.html").read_text()
    assert (run_dir / "charts" / "side_by_side_speedup.png").stat().st_size > 0
    rows = [line for line in summary.splitlines() if " llama-ngram " in line or " vllm-ngram " in line]
    assert {"code", "chat", "structured"} <= {line.split()[0] for line in rows}
