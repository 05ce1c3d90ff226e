MODEL (name reconciliation, kind TABLE, grain (run_id, arm, level));
-- Grain: one row per run_id, arm and level (all repeats together).
-- Purpose: prove the captured rows agree with vLLM's own counters. Each repeat's
--   block is compared on its own (before/after snapshots joined on arm, level and
--   repeat, within the run), then the level sums the blocks.
--   repeats     blocks of the level with captured rows or a before/after snapshot pair
--   captured_rounds, captured_proposed, captured_accepted
--               from int_rounds_attributed (replayed requests of that level):
--               rounds = rows with tokens_proposed > 0, proposed = sum(k), accepted = sum(a)
--   engine_rounds, engine_proposed, engine_accepted
--               sum over the level's blocks of the after - before delta of
--               vllm:spec_decode_num_drafts / _draft_tokens / _accepted_tokens
--               around the block (int_counter_deltas); NULL if the server does not
--               export them
--   diff_rounds, diff_proposed, diff_accepted
--               captured - coalesce(engine, 0); zero means exact agreement
--   repeats_differing  blocks whose own diffs are not all zero (a level whose
--               per-block differences cancel still shows here)
--   engine_counters_present  false for a server without speculation, or a level
--               without a complete before/after pair (interrupted run): then the
--               captured rows show up as a non-zero diff instead of vanishing
--   capture_present  false when no engine rows were captured for the level at all
--               (external server without the plugin): the diffs then say nothing
with deltas as (
    select * from int_counter_deltas
),
captured as (
    select
        run_id, arm, level, repeat,
        cast(sum(rounds) as bigint) as captured_rows,
        cast(coalesce(sum(rounds) filter (where is_verify_round), 0) as bigint) as captured_rounds,
        coalesce(sum(tokens_proposed * rounds), 0) as captured_proposed,
        coalesce(sum(tokens_accepted * rounds), 0) as captured_accepted
    from int_round_counts
    group by run_id, arm, level, repeat
),
per_block as (
    select
        run_id, arm, level, repeat,
        coalesce(captured.captured_rows, 0) as captured_rows,
        coalesce(captured.captured_rounds, 0) as captured_rounds,
        coalesce(captured.captured_proposed, 0) as captured_proposed,
        coalesce(captured.captured_accepted, 0) as captured_accepted,
        deltas.engine_rounds, deltas.engine_proposed, deltas.engine_accepted,
        coalesce(deltas.engine_counters_present, false) as engine_counters_present
    from deltas
    full outer join captured using (run_id, arm, level, repeat)
),
final as (
    select
        run_id, arm, level,
        count(*) as repeats,
        sum(captured_rounds) as captured_rounds,
        sum(engine_rounds) as engine_rounds,
        sum(captured_rounds) - coalesce(sum(engine_rounds), 0) as diff_rounds,
        sum(captured_proposed) as captured_proposed,
        sum(engine_proposed) as engine_proposed,
        sum(captured_proposed) - coalesce(sum(engine_proposed), 0) as diff_proposed,
        sum(captured_accepted) as captured_accepted,
        sum(engine_accepted) as engine_accepted,
        sum(captured_accepted) - coalesce(sum(engine_accepted), 0) as diff_accepted,
        count(*) filter (where captured_rounds <> coalesce(engine_rounds, 0)
                            or captured_proposed <> coalesce(engine_proposed, 0)
                            or captured_accepted <> coalesce(engine_accepted, 0)) as repeats_differing,
        bool_and(engine_counters_present) as engine_counters_present,
        sum(captured_rows) > 0 as capture_present
    from per_block
    group by run_id, arm, level
)
select * from final order by run_id, arm, level
