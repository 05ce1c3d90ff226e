-- stg_requests
-- Grain: one row per replayed request (RequestResult).
-- Purpose: the client-side record, typed. Nothing is derived here.
with source as (
    select * from raw_requests
),
final as (
    select
        run_id,
        arm,
        concurrency,
        repeat,
        request_id,
        prompt_id,
        category,
        max_tokens,
        temperature,
        success,
        error_type,
        http_status,
        error_message,
        wall_send_ns,
        ttft_ms,
        e2e_ms,
        chunk_offsets_ms,
        prompt_tokens,
        output_tokens,
        output_text,
        finish_reason,
        spec_num_steps,
        spec_num_draft_tokens,
        spec_num_accepted_tokens
    from source
)
select * from final
