MODEL (name stg_greedy_checks, kind VIEW, grain (run_id, request_id));
-- Grain: one row per run_id and request of the lossless pass (GreedyCheck):
--   greedy requests sent apart from the timed ones, asking for token ids and
--   the top-2 logprobs at every position (specdec.replay.passes.lossless).
-- Purpose: the lossless-pass record, typed. Nothing is derived here.
-- Columns: as schemas.records.GreedyCheck. Lists are per generated position,
--   0-based in the record (DuckDB lists index from 1: position p is [p + 1]).
--   run_id, arm: the analysis run and the role in it (by_role, sql/macros.sql; a classic
--   run's own); arm_name: the arm's own name; source_run_id: the run folder's id.
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from by_role('raw_greedy_checks')
