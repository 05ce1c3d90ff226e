MODEL (name speedup_by_input_length, kind TABLE, grain (run_id, input_bucket, level));
-- Grain: one row per run_id, input-length bucket and level that has
--   successful requests, every category of the run pooled.
-- Purpose: do long prompts change the answer? Speculation only speeds up decoding, so
--   the longer the prefill, the less of a request it can shorten.
--   input_bucket        by the request's prompt_tokens (the server's usage block):
--                       'short' < 256, 'medium' 256-1023, 'long' >= 1024 tokens
--                       (input_low, input_high: the bounds, high exclusive, NULL for long)
--   pairs, prompts      A/B pairs (int_requests_paired, comparison 'ab', bucket of the
--                       baseline request) and their distinct prompts
--   speedup             geometric mean of the pairs' baseline e2e / speculative e2e, as
--                       the speedup mart's per-category figure; no interval here (the
--                       bucket cuts across categories and blocks: read the speedup mart's
--                       intervals for claims); NULL without pairs
--   baseline_ttft_ms_p50, speculative_ttft_ms_p50, baseline_ttft_ms_p95,
--   speculative_ttft_ms_p95, baseline_e2e_ms_p50, speculative_e2e_ms_p50
--                       quantile_cont over the arm's successful requests in the bucket [ms]
--   requests            successful requests of both arms in the bucket
--   Requests without prompt_tokens (no usage block) are left out.
with requests as (
    select *,
        case when prompt_tokens < 256 then 'short' when prompt_tokens < 1024 then 'medium' else 'long' end
            as input_bucket,
        case when prompt_tokens < 256 then 0 when prompt_tokens < 1024 then 256 else 1024 end as input_low
    from int_requests_measured
    where prompt_tokens is not null
),
pairs as (
    select p.run_id, r.input_bucket, p.level, p.prompt_id, p.log_ratio
    from int_requests_paired p
    join requests r
      on r.run_id = p.run_id and r.arm = 'baseline' and r.prompt_id = p.prompt_id and r.category = p.category
     and r.level = p.level and r.repeat = p.repeat and r.pair_index = p.pair_index
    where p.comparison = 'ab'
),
paired as (
    select run_id, input_bucket, level, count(*) as pairs, count(distinct prompt_id) as prompts,
           exp(avg(log_ratio)) as speedup
    from pairs group by all
),
latency as (
    select run_id, input_bucket, any_value(input_low) as input_low, level, count(*) as requests,
        quantile_cont(ttft_ms, 0.5) filter (where arm = 'baseline') as baseline_ttft_ms_p50,
        quantile_cont(ttft_ms, 0.5) filter (where arm = 'speculative') as speculative_ttft_ms_p50,
        quantile_cont(ttft_ms, 0.95) filter (where arm = 'baseline') as baseline_ttft_ms_p95,
        quantile_cont(ttft_ms, 0.95) filter (where arm = 'speculative') as speculative_ttft_ms_p95,
        quantile_cont(e2e_ms, 0.5) filter (where arm = 'baseline') as baseline_e2e_ms_p50,
        quantile_cont(e2e_ms, 0.5) filter (where arm = 'speculative') as speculative_e2e_ms_p50
    from requests group by run_id, input_bucket, level
),
final as (
    select l.run_id, l.input_bucket, l.input_low,
           case l.input_low when 0 then 256 when 256 then 1024 end as input_high,
           l.level, coalesce(p.pairs, 0) as pairs, coalesce(p.prompts, 0) as prompts, p.speedup,
           l.baseline_ttft_ms_p50, l.speculative_ttft_ms_p50, l.baseline_ttft_ms_p95, l.speculative_ttft_ms_p95,
           l.baseline_e2e_ms_p50, l.speculative_e2e_ms_p50, l.requests
    from latency l
    left join paired p using (run_id, input_bucket, level)
)
select * from final order by run_id, input_low, level
