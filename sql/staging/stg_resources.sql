MODEL (name stg_resources, kind VIEW, grain (run_id, arm, level, repeat, wall_time_ns));
-- Grain: one row per resource sample: run_id, arm, level, repeat and time.
-- Purpose: what a server held while a block ran (ResourceReading, replay/resources.py),
--   sampled about once a second from the block's start to its end.
--   rss_bytes         resident memory of the server's process tree [bytes]; NULL for a
--                     server specdec did not start
--   kv_cache_usage    vllm:kv_cache_usage_perc [share 0..1]; NULL if not exported
--   requests_running  vllm:num_requests_running; NULL if not exported
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from by_role('raw_resources')
