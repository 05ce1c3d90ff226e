-- int_rounds_attributed
-- Grain: one row per request per engine step, for replayed requests only.
-- Purpose: attach arm, concurrency, repeat, category and prompt to each captured row
--   by joining on the client request id. Warm-up requests (not in
--   stg_requests) drop out here.
with rounds as (
    select * from stg_rounds
),
requests as (
    select request_id, arm, concurrency, repeat, category, prompt_id from stg_requests
),
final as (
    select requests.arm, requests.concurrency, requests.repeat, requests.category, requests.prompt_id, rounds.*
    from rounds
    join requests using (request_id)
)
select * from final
