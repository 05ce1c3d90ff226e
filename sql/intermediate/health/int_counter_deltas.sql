MODEL (name int_counter_deltas, kind VIEW, grain (run_id, arm, level, repeat));
-- Grain: one row per run_id, arm, level and repeat with both a before and an
--   after snapshot of the engine's counters (stg_engine_counters): one timed block.
-- Purpose: what the engine counted during the block, the one place the before/after
--   snapshots are paired (reconciliation compares it with the captured rounds,
--   acceptance_requests with the requests' own stats, int_blocks_measured reads the
--   prefix cache's).
--   engine_rounds, engine_proposed, engine_accepted
--                after - before of spec_decode_num_drafts / _draft_tokens /
--                _accepted_tokens (vLLM's vllm:, llama.cpp's llamacpp: counters);
--                NULL if the server does not export them
--   engine_counters_present  the after snapshot has the drafts counter
--   engine_accepted_per_position  after - before of the per-position accepted-token
--                counter, a list by draft position (element i is position i, from 1;
--                a position the before snapshot lacks counts from 0); NULL without it
--   prefix_cache_queries, prefix_cache_hits   after - before of
--                vllm:prefix_cache_queries_total / _hits_total [tokens]; NULL if absent
--   prefix_cache_reset   the before-snapshot's flag (POST /reset_prefix_cache just before)
with counters as (
    select * from stg_engine_counters
),
final as (
    select
        a.run_id, a.arm, a.level, a.repeat,
        a.spec_num_drafts - b.spec_num_drafts as engine_rounds,
        a.spec_num_draft_tokens - b.spec_num_draft_tokens as engine_proposed,
        a.spec_num_accepted_tokens - b.spec_num_accepted_tokens as engine_accepted,
        a.spec_num_drafts is not null as engine_counters_present,
        list_transform(range(1, len(a.accepted_per_position) + 1),
                       lambda i: a.accepted_per_position[i] - coalesce(b.accepted_per_position[i], 0))
            as engine_accepted_per_position,
        a.prefix_cache_queries - b.prefix_cache_queries as prefix_cache_queries,
        a.prefix_cache_hits - b.prefix_cache_hits as prefix_cache_hits,
        b.prefix_cache_reset
    from counters a
    join counters b
      on a.run_id = b.run_id and a.arm = b.arm and a.level = b.level and a.repeat = b.repeat
    where a.position = 'after' and b.position = 'before'
)
select * from final
