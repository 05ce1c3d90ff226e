MODEL (name stg_engine_counters, kind VIEW, grain (run_id, arm, level, repeat, position));
-- Grain: one row per run_id, arm, level, repeat and position (before/after).
-- Purpose: vLLM's cumulative /metrics counters (MetricSnapshot), typed.
--   NULL = the server does not export that counter (no speculation).
--   accepted_per_position  the per-position accepted-token counter, list by draft
--   position from 0 (DuckDB lists index from 1: element i + 1 is position i); NULL
--   without it (and in files written before the column existed).
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from by_role('raw_engine_counters')
