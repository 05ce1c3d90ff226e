MODEL (name stg_requests, kind TABLE, grain (run_id, request_id));
-- Grain: one row per run_id and replayed request (RequestResult).
-- Kind TABLE: during the build only: the Parquet is read once for the many models
--   over the requests (a lake of 200 runs has 2,400 requests files), not once per model.
-- Purpose: the client-side record, typed, but for the streamed content (chunk_offsets_ms,
--   chunk_tokens, output_text: stg_request_streams, tens of bytes per chunk, kilobytes per
--   text), so that this table is small. Nothing is derived here.
--   load_mode, level_value: how the level sent requests (closed | recorded |
--   poisson) and its setting (concurrency, time scale, or rate in requests/s);
--   in open loop, concurrency holds the level's key 1..N (specdec.replay.load.modes).
--   intended_send_ms, actual_send_ms: planned and actual send time, ms after the
--   block's start (monotonic); schedule_lag_ms = actual - intended (NULL in
--   closed loop); session_wait_ms: held for the previous turn of a session.
--   session_id, turn_index: the prompt's conversation and turn (from 0) in the
--   traffic; NULL for a standalone request, and in files written before the
--   columns existed (read as NULL: schemas.arrow.ABSENT_AS_NULL).
--   output_text_sha256: SHA-256 of output_text (hex), as the replay wrote it, or computed from
--   output_text for files written before it (sources.DERIVED): compare outputs by it, so the
--   texts (kilobytes each) are not read.
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
with source as (
    select * from by_role('raw_requests')
),
final as (
    -- every field of the record but the streamed content (stg_request_streams), in the record's
    -- order: the raw view casts each to the record's type (tests/analytics/test_sql_models.py)
    select * exclude (chunk_offsets_ms, chunk_tokens, output_text)
    from source
)
select * from final
