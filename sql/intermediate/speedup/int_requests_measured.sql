MODEL (name int_requests_measured, kind VIEW, grain (run_id, request_id));
-- Grain: one row per run_id and successful replayed request.
-- Purpose: per-request latency and speed, each defined once:
--   output_tokens_per_s = output_tokens / (e2e_ms / 1000)          [tokens/s, includes TTFT]
--   tpot_ms             = (e2e_ms - ttft_ms) / (output_tokens - 1)  [ms per token after the first;
--                         NULL when output_tokens <= 1]
--   wall_end_ns         = wall_send_ns + e2e_ms * 1e6
--   pair_index          = occurrence of this prompt within (run_id, arm, level, repeat), from 0,
--                         so a prompt sent twice in one block pairs 1:1 across arms and repeats
with requests as (
    select * from stg_requests where success
),
final as (
    select
        *,
        output_tokens / (e2e_ms / 1000.0) as output_tokens_per_s,
        case when output_tokens > 1 then (e2e_ms - ttft_ms) / (output_tokens - 1) end as tpot_ms,
        wall_send_ns + cast(e2e_ms * 1e6 as bigint) as wall_end_ns,
        row_number() over (partition by run_id, arm, level, repeat, prompt_id order by request_id) - 1
            as pair_index
    from requests
)
select * from final
