MODEL (name stg_counter_scrapes, kind VIEW, grain (server, wall_time_ns));
-- Grain: one row per read of a server's /metrics by the sidecar (CounterScrape, the
--   lake's counters/ folder): per server and wall time, NOT per run: the sidecar reads a
--   server, which can serve several runs (and traffic that is no run), so these rows
--   carry no run_id and no mart pools them into a run's figures.
-- Purpose: the scrapes, typed. Nothing is derived here.
--   spec_num_*, generation_tokens, prefix_cache_*   cumulative counters as read; NULL when
--                     absent or the read failed (scrape_ok false, error says why)
--   kv_cache_usage, requests_running   gauges as read; NULL likewise
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from raw_counter_scrapes
