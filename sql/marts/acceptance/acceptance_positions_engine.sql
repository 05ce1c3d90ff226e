MODEL (name acceptance_positions_engine, kind TABLE, grain (run_id, arm, level, position));
-- Grain: one row per run_id, arm, level and draft position whose engine
--   exported a per-position accepted-token counter (vLLM and llama.cpp both do),
--   pooled over the level's repeats (never over runs or levels).
-- Purpose: per-position acceptance from the engine's own counter: the only per-position
--   figure an engine without per-round rows has (llama.cpp), and for vLLM a check of
--   acceptance_positions' rounds against the counter, position by position.
--   position            i, from 1 (the first draft token; the counter's position i - 1)
--   engine_rounds       verify rounds the engine counted in the level's blocks
--                       (int_counter_deltas.engine_rounds, summed over repeats)
--   engine_accepted     drafts accepted at position i, per the counter (its after -
--                       before, summed over the blocks)
--   acceptance_at_position  engine_accepted / engine_rounds: the share of verify rounds
--                       whose draft was accepted up to position i (acceptance_positions'
--                       definition)
--   engine_accepted_total  the level's accepted draft tokens per the engine's total counter
--                       (int_counter_deltas.engine_accepted, summed over repeats)
--   covers_every_position  the positions' engine_accepted sum to engine_accepted_total: the
--                       counter has a series for every draft position, and then the
--                       acceptance_at_position sum to mean acceptance length - 1. vLLM's
--                       does (positions 0 .. k-1); llama.cpp's covers only the first few
--                       positions of its longer drafts, so there the sum falls short
--   captured_accepted   the same count from the captured rounds of the level's replayed
--                       requests (rounds with tokens_accepted >= i, int_round_counts);
--                       NULL when no round was captured (llama.cpp: no per-round data)
--   diff_accepted       captured_accepted - engine_accepted; 0 is exact agreement
with deltas as (
    select run_id, arm, level, repeat, engine_rounds, engine_accepted_per_position as per_pos
    from int_counter_deltas
    where engine_accepted_per_position is not null
),
engine as (
    select d.run_id, d.arm, d.level, p.position,
           sum(d.per_pos[p.position]) as engine_accepted
    from deltas d, unnest(range(1, len(d.per_pos) + 1)) as p(position)
    group by all
),
engine_rounds as (
    select d.run_id, d.arm, d.level, sum(d.engine_rounds) as engine_rounds,
           sum(c.engine_accepted) as engine_accepted_total
    from deltas d
    join int_counter_deltas c using (run_id, arm, level, repeat)
    group by all
),
captured as (
    select e.run_id, e.arm, e.level, e.position,
           sum(r.rounds) filter (where r.tokens_accepted >= e.position) as accepted_rows,
           count(r.rounds) as groups
    from engine e
    left join int_round_counts r
      on r.run_id = e.run_id and r.arm = e.arm and r.level = e.level and r.is_verify_round
    group by all
),
final as (
    select
        e.run_id, e.arm, e.level, e.position,
        cast(n.engine_rounds as bigint) as engine_rounds,
        e.engine_accepted,
        e.engine_accepted / nullif(n.engine_rounds, 0) as acceptance_at_position,
        n.engine_accepted_total,
        sum(e.engine_accepted) over (partition by e.run_id, e.arm, e.level) = n.engine_accepted_total
            as covers_every_position,
        case when c.groups > 0 then coalesce(c.accepted_rows, 0) end as captured_accepted,
        case when c.groups > 0 then coalesce(c.accepted_rows, 0) - e.engine_accepted end as diff_accepted
    from engine e
    join engine_rounds n using (run_id, arm, level)
    join captured c using (run_id, arm, level, position)
)
select * from final order by run_id, arm, level, position
