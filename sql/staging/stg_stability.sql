MODEL (name stg_stability, kind VIEW, grain (run_id, fault, probe_index));
-- Grain: one row per run_id and fault probe of a `specdec stability` run (StabilityResult).
-- Purpose: the probe record, typed. Nothing is derived here.
--   outcome  ok | degraded | failed | skipped (see StabilityResult.outcome)
--   rss_*    NULL = not sampled (only the soak samples RSS, and only for an
--            embedded server); rss_mb is the server's RSS after the probe.
-- every field of the record, in its order: the raw view casts each to the record's type, and
-- tests/analytics/test_sql_models.py holds the columns to the record's fields
select * from raw_stability
