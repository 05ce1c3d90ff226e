MODEL (name int_rounds_attributed, kind VIEW, grain (run_id, engine_request_id, process_token, step_index));
-- Grain: one row per run_id, request and engine step, for replayed requests only.
-- Purpose: attach arm, level, repeat, category and prompt to each captured row
--   by joining on the run and the client request id (a round of one run never
--   attributes to a request of another). Warm-up requests (not in stg_requests)
--   drop out here; capture_acceptance counts every captured row, attributed or not.
with rounds as (
    select * from stg_rounds
),
requests as (
    select run_id, source_run_id, request_id, arm, level, repeat, category, prompt_id from stg_requests
),
final as (
    select requests.arm, requests.level, requests.repeat, requests.category, requests.prompt_id,
           requests.run_id, rounds.* exclude (run_id)
    from rounds
    join requests on requests.source_run_id = rounds.run_id and requests.request_id = rounds.request_id
)
select * from final
