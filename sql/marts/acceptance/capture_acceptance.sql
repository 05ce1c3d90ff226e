MODEL (name capture_acceptance, kind TABLE, grain (run_id));
-- Grain: one row per run_id of the captured rounds (stg_rounds): every captured row of
--   the run, whether or not it belongs to a replayed request (warm-up requests, and any
--   other traffic the engine served under that run id, count too).
-- Purpose: acceptance as the engine saw it, per run, without the client's record: the
--   figure for a run the sidecar's Parquet lake holds (the lake has rounds, no requests
--   to attribute them to), the same definitions as acceptance. For a replayed run, quote
--   acceptance (per arm and category, replayed requests only).
--   rows              captured rows (one per request per engine step that emitted tokens)
--   engine_requests   distinct engine request ids among them
--   engines           distinct process_token values (engine process incarnations)
--   verify_rounds     rows with tokens_proposed > 0
--   tokens_proposed, tokens_accepted   summed over the run's rows
--   mean_acceptance_length  = mean_acceptance_length(tokens_accepted, verify_rounds)
--                     (sql/macros.sql: per round, pooled, the bonus token included); NULL
--                     without verify rounds
--   acceptance_rate   = acceptance_rate(tokens_accepted, tokens_proposed) (sql/macros.sql:
--                     per token, pooled); NULL when nothing was proposed
--   first_wall_time_ns, last_wall_time_ns  wall clock of the run's first and last captured
--                     step [Unix ns]
--   (The counts are read counted from int_round_groups: a group of n rows with k proposed
--   and a accepted adds n rows, n k and n a; engine requests from int_engine_requests (one
--   row each), engines and wall times from stg_rounds.)
with rounds as (
    select * from int_round_groups
),
engine_requests as (
    select source_run_id as run_id, count(distinct engine_request_id) as engine_requests
    from int_engine_requests group by source_run_id
),
engines as (
    select run_id, count(distinct process_token) as engines,
           min(wall_time_ns) as first_wall_time_ns, max(wall_time_ns) as last_wall_time_ns
    from stg_rounds
    group by run_id
),
counted as (
    select
        run_id,
        cast(sum(rounds) as bigint) as rows,
        cast(coalesce(sum(rounds) filter (where tokens_proposed > 0), 0) as bigint) as verify_rounds,
        coalesce(sum(tokens_proposed * rounds), 0) as tokens_proposed,
        coalesce(sum(tokens_accepted * rounds), 0) as tokens_accepted,
        mean_acceptance_length(sum(tokens_accepted * rounds), sum(rounds) filter (where tokens_proposed > 0))
            as mean_acceptance_length,
        acceptance_rate(sum(tokens_accepted * rounds), sum(tokens_proposed * rounds)) as acceptance_rate
    from rounds
    group by run_id
),
final as (
    select counted.run_id, counted.rows, engine_requests.engine_requests, engines.engines, counted.verify_rounds,
           counted.tokens_proposed, counted.tokens_accepted, counted.mean_acceptance_length,
           counted.acceptance_rate, engines.first_wall_time_ns, engines.last_wall_time_ns
    from counted
    join engines using (run_id)
    join engine_requests using (run_id)
)
select * from final order by run_id
