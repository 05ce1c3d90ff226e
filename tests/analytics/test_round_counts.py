"""The marts over the rounds read them counted (int_round_counts) and look
requests up per engine request (int_engine_requests); they must give what
their row-level definitions give over int_rounds_attributed, one row per
captured round. The references below are those definitions, as the marts
were written before the counting (the formulas of their headers).

The run: the lossless tests' (tests/support/lossless_run.py; natural ends: rounds before and after the end, a
prompt that never ends, end-of-sequence ids unknown), plus, at level 2, a
second speculative request of pB whose rounds share engine steps with pB's
(batch_size 2), a warm-up request's rounds, and rounds in four context
buckets."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import pytest

from specdec.analytics.build import build
from tests.support import lossless_run
from tests.support.duck import rows as _rows  # a local list is called rows
from tests.support.synthetic_run import RUN, T0, make_manifest, write_run

REFERENCE = {
    "acceptance": """
        select run_id, arm, category,
            count(*) filter (where is_verify_round) as verify_rounds,
            coalesce(sum(tokens_proposed), 0) as tokens_proposed,
            coalesce(sum(tokens_accepted), 0) as tokens_accepted,
            1 + sum(tokens_accepted) / nullif(count(*) filter (where is_verify_round), 0) as mean_acceptance_length,
            sum(tokens_accepted) / nullif(sum(tokens_proposed), 0) as acceptance_rate,
            count(*) filter (where phase = 'decode' and not is_verify_round) as decode_steps_no_draft,
            count(*) filter (where is_verify_round and tokens_accepted = 0) as rounds_all_rejected
        from int_rounds_attributed group by all""",
    "acceptance_by_context": """
        with r as (select *, case when context_len < 256 then 0 when context_len < 512 then 256
                                  when context_len < 1024 then 512 when context_len < 2048 then 1024
                                  when context_len < 4096 then 2048 else 4096 end as context_low
                   from int_rounds_attributed where is_verify_round)
        select run_id, arm, category, context_low, count(*) as verify_rounds, count(distinct request_id) as requests,
               1 + sum(tokens_accepted) / count(*) as mean_acceptance_length,
               sum(tokens_accepted) / sum(tokens_proposed) as acceptance_rate, avg(tokens_emitted) as tokens_per_round
        from r group by all""",
    "acceptance_positions": """
        with rounds as (select run_id, arm, category, tokens_proposed as k, tokens_accepted as a, count(*) as n
                        from int_rounds_attributed where is_verify_round group by all),
        groups as (select run_id, arm, category, max(k) as max_k from rounds group by all),
        positions as (select run_id, arm, category, unnest(range(1, cast(max_k as bigint) + 1)) as position
                      from groups)
        select p.run_id, p.arm, p.category, p.position, sum(r.n) filter (where r.a >= p.position) as accepted,
               sum(r.n) filter (where r.k >= p.position and r.a = p.position - 1) as first_rejections
        from positions p join rounds r using (run_id, arm, category) group by all""",
    "acceptance_definitions": """
        with per_request as (
            select run_id, arm, category, request_id, count(*) filter (where is_verify_round) as verify_rounds,
                   avg(tokens_accepted + 1) filter (where is_verify_round) as mean_length
            from int_rounds_attributed group by all)
        select g.run_id, g.arm, g.category, g.verify_rounds, g.requests, g.decode_steps_no_draft, g.rounds_all_rejected,
               g.vllm_mean_acceptance_length, g.aiperf_accepted_per_verified, g.specbench_mean_accepted_tokens,
               m.aiperf_acceptance_length_per_request
        from (select run_id, arm, category,
                     count(*) filter (where is_verify_round) as verify_rounds,
                     count(distinct request_id) filter (where is_verify_round) as requests,
                     count(*) filter (where phase = 'decode' and not is_verify_round) as decode_steps_no_draft,
                     count(*) filter (where is_verify_round and tokens_accepted = 0) as rounds_all_rejected,
                     1 + sum(tokens_accepted) filter (where is_verify_round)
                         / nullif(count(*) filter (where is_verify_round), 0) as vllm_mean_acceptance_length,
                     sum(tokens_accepted + 1) filter (where is_verify_round)
                         / nullif(sum(tokens_proposed + 1) filter (where is_verify_round), 0)
                         as aiperf_accepted_per_verified,
                     avg(tokens_emitted) filter (where phase = 'decode') as specbench_mean_accepted_tokens
              from int_rounds_attributed group by all) g
        join (select run_id, arm, category, avg(mean_length) filter (where verify_rounds > 0)
                  as aiperf_acceptance_length_per_request
              from per_request group by all) m using (run_id, arm, category)""",
    "acceptance_natural_end": """
        with placed as (
            select r.run_id, r.category, r.level, r.request_id, r.tokens_proposed, r.tokens_accepted,
                   case when e.eos_known is not true or q.prompt_tokens is null then 'unknown'
                        when e.natural_end_position is null then 'before_natural_end'
                        when r.context_len - q.prompt_tokens + 1 < e.natural_end_position then 'before_natural_end'
                        else 'after_natural_end' end as segment
            from int_rounds_attributed r
            join (select run_id, request_id, prompt_tokens from stg_requests
                  where arm = 'speculative' and temperature = 0) q using (run_id, request_id)
            left join int_natural_ends e
              on e.run_id = r.run_id and e.level = r.level and e.prompt_id = r.prompt_id
            where r.arm = 'speculative' and r.is_verify_round)
        select run_id, category, level, segment, count(distinct request_id) as requests,
               count(*) as verify_rounds, sum(tokens_proposed) as tokens_proposed,
               sum(tokens_accepted) as tokens_accepted, 1 + sum(tokens_accepted) / count(*) as mean_acceptance_length
        from placed group by all""",
    "reconciliation": """
        select run_id, arm, level, count(*) filter (where is_verify_round) as captured_rounds,
               sum(tokens_proposed) as captured_proposed, sum(tokens_accepted) as captured_accepted
        from int_rounds_attributed group by all""",
    "step_timing": """
        with steps as (select run_id, arm, level, process_token, step_index, any_value(batch_size) as batch_size,
                              any_value(verify_ms) as verify_ms, max(draft_ms) as draft_ms
                       from int_rounds_attributed where phase = 'decode' group by all)
        select run_id, arm, level, count(*) as steps, avg(verify_ms) as verify_ms_mean,
               avg(draft_ms) as draft_ms_mean,
               sum(draft_ms) / nullif(sum(draft_ms) + sum(verify_ms) filter (where draft_ms is not null), 0)
                   as draft_share,
               avg(batch_size) as batch_size_mean
        from steps group by all""",
    "capture_acceptance": """
        select run_id, count(*) as rows, count(distinct engine_request_id) as engine_requests,
               count(distinct process_token) as engines, count(*) filter (where tokens_proposed > 0) as verify_rounds,
               sum(tokens_proposed) as tokens_proposed, sum(tokens_accepted) as tokens_accepted,
               min(wall_time_ns) as first_wall_time_ns, max(wall_time_ns) as last_wall_time_ns
        from stg_rounds group by all""",
}


def _extra_rounds():
    """pB's second speculative request at c2 sharing steps 100.. with pB (batch 2), contexts
    across buckets; a warm-up request; pB's own rounds at c2 at the same steps."""
    rows = []
    for rid, (k, a) in ((f"sd.{RUN}.speculative.c2.r0.pB", (4, 1)), (f"sd.{RUN}.speculative.c2.r0.pB2", (4, 3))):
        for i, ctx in enumerate((100, 300, 700, 1500, 5000)):
            r = lossless_run.round_trace(rid, 100 + i, k, a if i % 2 else a - 1, ctx)
            rows.append(r.model_copy(update={"batch_size": 2, "draft_ms": 0.5 + i, "verify_ms": 10.0 + i}))
    rows.append(lossless_run.round_trace(f"sd.{RUN}.speculative.c0.r0.warmup", 200, 4, 4, 10))
    return rows


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    run_dir = lossless_run.make_run(tmp_path_factory.mktemp("rounds"))
    timed = lossless_run.make_timed()
    pb2 = next(q for q in timed if q.request_id == f"sd.{RUN}.speculative.c1.r0.pB")
    timed += [
        pb2.model_copy(update={"level": 2, "request_id": f"sd.{RUN}.speculative.c2.r0.pB"}),
        pb2.model_copy(update={"level": 2, "request_id": f"sd.{RUN}.speculative.c2.r0.pB2", "wall_send_ns": T0 + 5}),
    ]
    write_run(
        run_dir,
        requests=timed,
        rounds=lossless_run.make_rounds() + _extra_rounds(),
        manifest=make_manifest(dtype="bfloat16", max_error_rate=0.5),
    )
    return duckdb.connect(str(build(run_dir)), read_only=True)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9)
    return a == b


@pytest.mark.parametrize("mart", sorted(REFERENCE))
def test_a_mart_over_the_counted_rounds_equals_its_row_level_definition(db, mart):
    want = _rows(db, REFERENCE[mart])
    assert want, mart  # the run exercises it
    cols = list(want[0])
    key = [c for c in cols if not isinstance(want[0][c], float)][:4]
    got = {tuple(r[c] for c in key): r for r in _rows(db, f"select * from {mart}")}
    assert len(got) >= len(want), mart
    for w in want:
        g = got[tuple(w[c] for c in key)]
        for c in cols:
            assert _same(g[c], w[c]) or g[c] == w[c], (mart, w, c, g[c])


def test_the_run_has_what_the_comparison_needs(db):
    segments = {r["segment"] for r in _rows(db, "select segment from acceptance_natural_end")}
    assert segments == {"before_natural_end", "after_natural_end", "unknown"}
    buckets = {r["context_low"] for r in _rows(db, "select context_low from acceptance_by_context")}
    assert {0, 256, 512, 1024, 4096} <= buckets
    (c2,) = [r for r in _rows(db, "select * from step_timing where arm = 'speculative' and level = 2")]
    assert c2["steps"] == 6 and c2["batch_size_mean"] == pytest.approx((5 * 2 + 1) / 6)  # 5 shared steps + pA's one
    assert _rows(db, "select rows from capture_acceptance")[0]["rows"] == len(lossless_run.make_rounds()) + 11


@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("0", "engine request ids chatcmpl-"),  # every engine request id of the run shares one key
        ("case when id like 'chatcmpl-%' then hash(id) else 0 end", "request ids sd."),  # every request id
    ],
)
def test_two_ids_with_one_integer_key_stop_the_models_with_an_error_naming_them(db, tmp_path, key, named):
    # DuckDB's 64-bit hash of two ids of a run coinciding cannot be produced on purpose: the
    # macro the models key the ids by is replaced in a copy of the database instead
    path = tmp_path / "copy.duckdb"
    path.write_bytes(
        Path(
            db.execute("select path from duckdb_databases() where database_name = current_database()").fetchone()[0]
        ).read_bytes()
    )
    con = duckdb.connect(str(path))
    assert con.execute("select count(*) from int_engine_requests").fetchone()[0] > 1
    con.execute(f"create or replace macro id_key(id) as {key}")
    with pytest.raises(duckdb.Error, match=rf"run {RUN}: {named}\S+ and \S+ have the same id_key"):
        con.execute("select * from int_engine_requests").fetchall()
