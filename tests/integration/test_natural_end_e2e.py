"""Per-chunk token counts on the embedded engine (issue 6, item 9): the timed
requests ask for vLLM's continuous_usage_stats, so every content chunk carries
the running output-token count, and the speedup can be split at the natural
end. One level, one repeat, float32 (the same greedy text in both arms), on
the session's shared servers (tests/support/engine_servers.py)."""

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.replay.config import ReplayConfig
from specdec.replay.experiment import run_replay
from tests.support.engine_servers import embedded_as

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def con(tmp_path_factory, model_dir, fixtures, vllm_pair):
    cfg = ReplayConfig(
        traffic=fixtures / "traffic_small.jsonl",
        runs_dir=tmp_path_factory.mktemp("runs"),
        run_id="natural-end",
        levels=[1],
        max_tokens=32,
        warmup_requests=1,
        model=model_dir,
        dtype="float32",
        repeats=1,
        lossless_pass=True,
        samples=0,
        progress=False,
    )
    with embedded_as(vllm_pair):
        run_dir = run_replay(cfg)
    return duckdb.connect(str(build(run_dir)), read_only=True)


def test_every_timed_request_has_running_token_counts(con):
    rows = con.execute(
        "select s.arm, s.request_id, s.chunk_offsets_ms, s.chunk_tokens, r.output_tokens, "
        "r.spec_num_accepted_tokens from stg_request_streams s join stg_requests r using (run_id, request_id) "
        "where s.success order by all"
    ).fetchall()
    assert {r[0] for r in rows} == {"baseline", "speculative"} and len(rows) == 6
    for _arm, rid, offsets, tokens, output_tokens, accepted in rows:
        assert tokens is not None and len(tokens) == len(offsets) > 0, rid
        assert tokens == sorted(tokens) and tokens[0] >= 1, (rid, tokens)  # non-decreasing
        assert tokens[-1] == output_tokens == 32, (rid, tokens)
        if accepted:  # an accepted draft puts two or more tokens into one step, so into one chunk
            assert max(b - a for a, b in zip([0] + tokens, tokens)) >= 2, (rid, tokens)


def test_pairs_are_split_without_missing_counts(con):
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
        join int_requests_paired r using (comparison, category, concurrency, repeat, prompt_id, pair_index)
        where p.segment <> 'unknown'
        group by p.category, p.concurrency, p.prompt_id, p.repeat, p.pair_index, r.reference_e2e_ms,
                 r.treatment_e2e_ms
        having abs(sum(p.reference_ms) - r.reference_e2e_ms) > 1e-6
            or abs(sum(p.treatment_ms) - r.treatment_e2e_ms) > 1e-6""").fetchall()
    assert bad == []
