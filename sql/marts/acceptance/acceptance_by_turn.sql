MODEL (name acceptance_by_turn, kind TABLE, grain (run_id, arm, level, category, turn_index));
-- Grain: one row per run_id, arm, level, category and session turn that has
--   successful requests, pooled over the level's repeats (never over runs or levels);
--   turn_index NULL is the row of the standalone requests (no session).
-- Purpose: does speculation hold up as a conversation goes on? A later turn carries
--   the earlier turns in its prompt (longer context, text the draft can copy from).
--   The turn is the traffic row's (TrafficRow.turn_index, recorded per request as
--   stg_requests.turn_index); a run made before requests recorded it has only the
--   NULL row.
--   turn_index          turn within the session, from 0; NULL: standalone requests
--   requests            successful replayed requests of the turn (int_requests_measured)
--   sessions            distinct session_id among them (0 for the standalone row)
--   prompt_tokens_mean  mean prompt tokens per the server's usage block
--   verify_rounds       captured rounds with tokens_proposed > 0 of those requests
--                       (int_round_counts); 0 without drafts or without capture
--   mean_acceptance_length  mean_acceptance_length(sum(tokens_accepted), verify_rounds)
--                       (sql/macros.sql; per-round, as acceptance); NULL without a verify round
--   acceptance_rate     acceptance_rate(sum(tokens_accepted), sum(tokens_proposed)) over
--                       those rounds (sql/macros.sql; per-token, as acceptance); NULL likewise
--   tokens_per_round    tokens_per_round(sum(tokens_emitted), verify_rounds) (sql/macros.sql):
--                       mean tokens_emitted per verify round (the bonus token included)
--   stats_acceptance_rate  acceptance_rate(sum(spec_num_accepted_tokens), sum(spec_num_draft_tokens))
--                       from the engine's per-request stats (acceptance_requests' source:
--                       the figure an engine without per-round rows, llama.cpp, has);
--                       NULL when no request reports drafted tokens
--   output_tokens_per_s_mean  mean over requests of output_tokens / e2e seconds
--   ttft_ms_p50, tpot_ms_p50  quantile_cont over the requests [ms; ms/token]
with requests as (
    select run_id, arm, level, category, request_id, session_id, turn_index, prompt_tokens,
           output_tokens_per_s, ttft_ms, tpot_ms, spec_num_draft_tokens, spec_num_accepted_tokens
    from int_requests_measured
),
rounds as (
    select run_id, request_key,
           sum(rounds) as verify_rounds,
           sum(tokens_proposed * rounds) as tokens_proposed,
           sum(tokens_accepted * rounds) as tokens_accepted,
           sum(tokens_emitted) as tokens_emitted
    from int_round_counts
    where is_verify_round
    group by run_id, request_key
),
final as (
    select
        requests.run_id, requests.arm, requests.level, requests.category, requests.turn_index,
        count(*) as requests,
        count(distinct requests.session_id) as sessions,
        avg(requests.prompt_tokens) as prompt_tokens_mean,
        cast(coalesce(sum(rounds.verify_rounds), 0) as bigint) as verify_rounds,
        mean_acceptance_length(sum(rounds.tokens_accepted), sum(rounds.verify_rounds)) as mean_acceptance_length,
        acceptance_rate(sum(rounds.tokens_accepted), sum(rounds.tokens_proposed)) as acceptance_rate,
        tokens_per_round(sum(rounds.tokens_emitted), sum(rounds.verify_rounds)) as tokens_per_round,
        acceptance_rate(sum(requests.spec_num_accepted_tokens), sum(requests.spec_num_draft_tokens))
            as stats_acceptance_rate,
        avg(requests.output_tokens_per_s) as output_tokens_per_s_mean,
        quantile_cont(requests.ttft_ms, 0.5) as ttft_ms_p50,
        quantile_cont(requests.tpot_ms, 0.5) as tpot_ms_p50
    from requests
    left join rounds on rounds.run_id = requests.run_id and rounds.request_key = id_key(requests.request_id)
    group by all
)
select * from final order by run_id, arm, level, category, turn_index nulls first
