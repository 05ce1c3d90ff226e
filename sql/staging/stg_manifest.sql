MODEL (name stg_manifest, kind VIEW, grain (run_id));
-- Grain: one row per analysis run (specdec/arms.py): a classic run's own run_id, or one
--   <run_id>/<arm> per comparison of a run of named arms (raw_arm_roles); every run of
--   raw_manifest, and a run only the sidecar's lake holds (manifest NULL).
-- Purpose: the run manifest (RunManifest as JSON) under the run ids the models use.
--   run_id          the analysis run
--   source_run_id   the run folder's id (raw_manifest.run_id)
--   source_path     where the build found the run: its run folder, or the lake [absolute path]
--   manifest        the validated manifest of the run folder, as JSON (NULL for a lake-only run)
--   reference_arm, treatment_arm   the arms (their own names) the analysis run compares:
--                   NULL for a classic run (baseline and speculative); treatment_arm NULL
--                   for an arm that nothing is measured against
with source as (
    select run_id, source_path, manifest from raw_manifest
),
runs as (
    select distinct run_id, analysis_run_id, reference_arm, treatment_arm from raw_arm_roles
),
final as (
    select
        coalesce(runs.analysis_run_id, source.run_id) as run_id,
        source.run_id as source_run_id,
        source.source_path,
        source.manifest,
        runs.reference_arm,
        runs.treatment_arm
    from source
    left join runs on runs.run_id = source.run_id
)
select * from final
