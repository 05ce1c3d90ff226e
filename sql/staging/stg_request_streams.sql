MODEL (name stg_request_streams, kind VIEW, grain (run_id, request_id));
-- Grain: one row per run_id and replayed request (RequestResult), as stg_requests.
-- Purpose: what a request streamed, kept apart from stg_requests because it is the bulk of
--   a run (a chunk per engine step: tens of bytes per token; texts of kilobytes), so the
--   models that need it read it and the many that do not never do. With the request's
--   keys and the columns the models over it filter or group by. Nothing is derived here.
--   chunk_offsets_ms: arrival of each content chunk, ms after send (monotonic clock).
--   chunk_tokens: per content chunk, aligned with chunk_offsets_ms, the running
--   output-token count the server reported [tokens]; NULL when it did not report
--   one for every content chunk (per-chunk usage unknown).
--   output_text: the concatenated text (compare outputs by stg_requests.output_text_sha256).
--   run_id, arm, arm_name, source_run_id: as stg_requests (by_role, sql/macros.sql).
with source as (
    select * from by_role('raw_requests')
),
final as (
    select
        columns(role_keys()),  -- the key columns by_role adds (sql/macros.sql)
        level,
        repeat,
        request_id,
        prompt_id,
        category,
        success,
        temperature,
        chunk_offsets_ms,
        chunk_tokens,
        output_text
    from source
)
select * from final
