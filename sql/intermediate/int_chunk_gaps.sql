-- int_chunk_gaps
-- Grain: one row per run_id and gap between consecutive streamed content chunks of a request.
-- Purpose: inter-chunk latency of the successful requests (those of int_requests_measured).
--   With speculation one chunk can carry several tokens, so a chunk gap is not a per-token
--   latency (see tpot_ms for that).
--   chunk_gap_ms = chunk_offsets_ms[i+1] - chunk_offsets_ms[i]   [ms]
with requests as (
    select run_id, request_id, arm, concurrency, repeat, category, chunk_offsets_ms from stg_request_streams
    where success
),
final as (
    select
        run_id, request_id, arm, concurrency, repeat, category,
        -- the two unnests of one select are read in step: element i of each (no lambda per element)
        unnest(list_slice(chunk_offsets_ms, 2, len(chunk_offsets_ms)))
            - unnest(list_slice(chunk_offsets_ms, 1, len(chunk_offsets_ms) - 1)) as chunk_gap_ms
    from requests
    where len(chunk_offsets_ms) > 1
)
select * from final
