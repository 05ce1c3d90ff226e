MODEL (name int_run_settings, kind VIEW, grain (run_id));
-- Grain: one row per run_id (every analysis run of stg_manifest: one per run folder, or
--   one per comparison of a run of named arms, and one per run that only the sidecar's
--   lake holds, whose manifest is NULL).
-- Purpose: the manifest settings the marts read, typed, from stg_manifest
--   (the validated RunManifest of each run as JSON). Nothing is derived here.
--   run_id          the run (manifest.run_id, or the lake's run_id partition)
--   source_path     where the build found the run: its run folder, or the lake [absolute path]
--   has_manifest    false for a run known only from the lake (every setting below NULL,
--                   except knee_peak_fraction's default)
--   finished        manifest.finished: false when the run was interrupted or is still running
--   max_error_rate  manifest.max_error_rate: a level whose error_rate exceeds it is failed [share 0..1]
--   capture_source  manifest.capture.source: embedded | directory | none; NULL if not recorded
--   dtype           manifest.dtype: the numeric precision both servers ran in (lossless conditions)
--   knee_peak_fraction  manifest.knee_peak_fraction when the manifest has it, else the
--                   default 0.5: the knee mart's "gain lost" level is the first level past
--                   the peak where speedup - 1 < knee_peak_fraction * (peak - 1)  [share 0..1]
--   margin          manifest.margin when the manifest has it, else the default 0.05: the
--                   practical margin delta declared before the run, which the speedup labels
--                   read (analytics/labels.py: equivalent = inside [1/(1+delta), 1+delta])  [share]
with source as (
    select run_id, source_path, manifest from stg_manifest
),
final as (
    select
        run_id,
        source_path,
        manifest is not null as has_manifest,
        cast(manifest ->> 'finished' as boolean) as finished,
        cast(manifest ->> 'max_error_rate' as double) as max_error_rate,
        manifest -> 'capture' ->> 'source' as capture_source,
        manifest ->> 'dtype' as dtype,
        coalesce(try_cast(manifest ->> 'knee_peak_fraction' as double), 0.5) as knee_peak_fraction,
        coalesce(try_cast(manifest ->> 'margin' as double), 0.05) as margin
    from source
)
select * from final
