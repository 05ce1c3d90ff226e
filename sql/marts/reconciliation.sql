-- reconciliation
-- Grain: one row per arm and concurrency level.
-- Purpose: prove the captured rows agree with vLLM's own counters.
--   captured_rounds, captured_proposed, captured_accepted
--               from int_rounds_attributed (replayed requests of that level):
--               rounds = rows with tokens_proposed > 0, proposed = sum(k), accepted = sum(a)
--   engine_rounds, engine_proposed, engine_accepted
--               after - before delta of vllm:spec_decode_num_drafts / _draft_tokens /
--               _accepted_tokens around the level; NULL if the server does not export them
--   diff_rounds, diff_proposed, diff_accepted
--               captured - coalesce(engine, 0); zero means exact agreement
--   engine_counters_present  false for a server without speculation, or a level
--               without a complete before/after pair (interrupted run): then the
--               captured rows show up as a non-zero diff instead of vanishing
--   capture_present  false when no engine rows were captured for the level at all
--               (external server without the plugin): the diffs then say nothing
with counters as (
    select * from stg_engine_counters
),
deltas as (
    select
        a.arm, a.concurrency,
        a.spec_num_drafts - b.spec_num_drafts as engine_rounds,
        a.spec_num_draft_tokens - b.spec_num_draft_tokens as engine_proposed,
        a.spec_num_accepted_tokens - b.spec_num_accepted_tokens as engine_accepted,
        a.spec_num_drafts is not null as engine_counters_present
    from counters a
    join counters b on a.arm = b.arm and a.concurrency = b.concurrency
    where a.position = 'after' and b.position = 'before'
),
captured as (
    select
        arm, concurrency,
        count(*) as captured_rows,
        count(*) filter (where is_verify_round) as captured_rounds,
        coalesce(sum(tokens_proposed), 0) as captured_proposed,
        coalesce(sum(tokens_accepted), 0) as captured_accepted
    from int_rounds_attributed
    group by arm, concurrency
),
final as (
    select
        arm, concurrency,
        coalesce(captured.captured_rounds, 0) as captured_rounds,
        deltas.engine_rounds,
        coalesce(captured.captured_rounds, 0) - coalesce(deltas.engine_rounds, 0) as diff_rounds,
        coalesce(captured.captured_proposed, 0) as captured_proposed,
        deltas.engine_proposed,
        coalesce(captured.captured_proposed, 0) - coalesce(deltas.engine_proposed, 0) as diff_proposed,
        coalesce(captured.captured_accepted, 0) as captured_accepted,
        deltas.engine_accepted,
        coalesce(captured.captured_accepted, 0) - coalesce(deltas.engine_accepted, 0) as diff_accepted,
        coalesce(deltas.engine_counters_present, false) as engine_counters_present,
        coalesce(captured.captured_rows, 0) > 0 as capture_present
    from deltas
    full outer join captured using (arm, concurrency)
)
select * from final order by arm, concurrency
