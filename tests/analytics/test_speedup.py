"""Runs with repeats (see conftest: repeated_requests): the paired speedup, its
intervals, the A/A floor, the labels, the knee, per-block throughput and
prefix cache, and pairing by repeat in the other marts."""

from __future__ import annotations

import math

import pytest
from pytest import approx

from specdec.schemas.records import RoundTrace

from .conftest import RUN, T0, repeated_counters, repeated_requests, write_run


def by(rows, *keys):
    return {tuple(r[k] for k in keys): r for r in rows}


def rows_of(query, sql, *keys):
    return by(query(sql), *keys)


def run_with(tmp_path, e2e, counters=None, **kw):
    """A run of ``repeated_requests(e2e, **kw)``, no captured rounds."""
    levels, repeats = kw.get("levels", (1, 2)), kw.get("repeats", 2)
    counters = counters or repeated_counters(levels=levels, repeats=repeats)
    return write_run(tmp_path, requests=repeated_requests(e2e, **kw), rounds=[], counters=counters)


# code-0: baseline 2000 ms, speculative 1000 ms (ratio 2); code-1: 1000 -> 125 ms (ratio 8);
# chat: 2000 -> 1600 ms (ratio 1.25) for both prompts. Every repeat alike.
SPEC = {"code-0": 1000.0, "code-1": 125.0, "chat-0": 1600.0, "chat-1": 1600.0}
BASE = {"code-0": 2000.0, "code-1": 1000.0, "chat-0": 2000.0, "chat-1": 2000.0}


def steady(arm, pid, level, repeat):
    return BASE[pid] if arm == "baseline" else SPEC[pid]


def test_paired_speedup_is_the_geometric_mean_of_paired_e2e_ratios(tmp_path, query):
    run_with(tmp_path, steady)
    got = rows_of(query, "select * from speedup where category = 'code'", "concurrency")[(1,)]
    # pairs: 2 prompts x 2 repeats; ratios 2, 8, 2, 8 -> geometric mean 4
    assert (got["speedup"], got["pairs"], got["prompts"], got["repeats"]) == (approx(4.0), 4, 2, 2)
    # the old mean of rates: baseline 50 and 100 tokens/s (mean 75), speculative 100 and 800 (mean 450): 6
    assert got["speedup_mean_of_rates"] == approx(6.0)
    assert got["definition"] == "geometric mean of paired e2e ratios"
    # every repeat alike: zero-width measurement interval; prompts interval spans 2 .. 8
    assert (got["ci_low"], got["ci_high"]) == (approx(4.0), approx(4.0))
    assert (got["prompts_ci_low"], got["prompts_ci_high"]) == (approx(2.0), approx(8.0))
    # A/A: the baseline repeats are identical -> 1, interval [1, 1], 2 pairs (one per prompt)
    assert (got["aa_speedup"], got["aa_ci_low"], got["aa_ci_high"], got["aa_floor"], got["aa_pairs"]) == (
        approx(1.0), approx(1.0), approx(1.0), approx(1.0), 2)
    assert (got["label"], got["label_basis"]) == ("faster", "measurement interval against 1 and the A/A floor")


def test_system_speedup_is_per_repeat_and_blocks_never_span_each_other(tmp_path, query):
    # baseline 2000 ms in repeat 0, 4000 ms in repeat 1; speculative 1000 and 500 ms
    e2e = lambda arm, pid, level, r: {("baseline", 0): 2000, ("baseline", 1): 4000,  # noqa: E731
                                      ("speculative", 0): 1000, ("speculative", 1): 500}[arm, r]
    run_with(tmp_path, e2e, levels=(1,))
    thr = rows_of(query, "select * from throughput", "arm")
    # blocks of 4 x 100 tokens: baseline 2.0 s + 4.0 s (not the 100+ s from its first send to its
    # last end, which would span the speculative block in between)
    base = thr["baseline",]
    assert (base["repeats"], base["level_seconds"], base["output_tokens"]) == (2, 6.0, 800)
    assert base["output_tokens_per_s"] == approx(800 / 6.0)
    assert (base["output_tokens_per_s_min"], base["output_tokens_per_s_max"]) == (100.0, 200.0)
    (sys,) = query("select * from speedup where category = '(system)'")
    # per repeat: 400/200 = 2 and 800/100 = 8 -> geometric mean 4. Interval: t over repeats.
    # A/B residuals +-ln(4)/2 * sqrt(2/1) (every group of this run has the same two block
    # figures): mean square 2 (ln 2)^2, df 1; A/A: one figure ln 0.5 per group (the baseline
    # halved its speed): mean square (ln 2)^2, df 1. Pooled s2 = 1.5 (ln 2)^2, df 2, t = 4.303:
    # ln 4 +- t sqrt(s2 / 2) = 4 x 2^(-+t sqrt(0.75)), a width that says two repeats that differ
    # 4x measure next to nothing
    t2 = 4.302652729749464
    h, h_aa = t2 * math.sqrt(0.75), t2 * math.sqrt(1.5)  # in units of ln 2
    assert (sys["speedup"], sys["ci_low"], sys["ci_high"], sys["pairs"], sys["repeats"]) == (
        approx(4.0), approx(4 * 2 ** -h), approx(4 * 2 ** h), 2, 2)
    # the A/A interval: ln 0.5 +- t sqrt(s2) (one figure)
    assert (sys["aa_speedup"], sys["aa_pairs"]) == (approx(0.5), 1)
    assert (sys["aa_ci_low"], sys["aa_ci_high"]) == (approx(0.5 * 2 ** -h_aa), approx(0.5 * 2 ** h_aa))
    assert sys["aa_floor"] == approx(2 * 2 ** h_aa)  # the baseline halved its own speed
    # 4x, but the interval does not clear a baseline that moved 2x between its own repeats
    assert (sys["label"], sys["label_basis"]) == ("within noise", "measurement interval against 1 and the A/A floor")


LABELS = {1: 2.5, 2: 0.4, 4: None, 8: 1.5}  # speculative ratio per level (None: 1.25 then 0.8)


def labelled(arm, pid, level, r):
    base = 2000.0
    if level == 8 and r == 1:  # the host slows at c8 repeat 1: both arms 1.1x slower
        base = 2200.0
    if arm == "baseline":
        return base
    ratio = LABELS[level] if LABELS[level] is not None else (1.25 if r == 0 else 0.8)
    return base / ratio


def test_labels_from_the_interval_and_the_aa_floor(tmp_path, query):
    run_with(tmp_path, labelled, levels=(1, 2, 4, 8))
    got = rows_of(query, "select * from speedup where category = 'code'", "concurrency")
    # Noise pool of this run: only c4 moves between repeats (A/B figures ln 1.25 and
    # ln 0.8), so code, chat and (system) there have residuals +-s, s = sqrt(2) ln 1.25:
    # 6 of the 24 A/B residuals, mean square s^2 / 4, df 4 (four levels, two repeats); the A/A
    # figures: ln(1/1.1) at c8 in 3 groups, 0 elsewhere: mean square (ln 1.1)^2 / 4, df 4.
    # Pooled s2 = (s^2 + (ln 1.1)^2) / 8, df 8, t = 2.306. A group's half-width: t sqrt(s2 / 2);
    # an A/A group's (one figure): t sqrt(s2).
    s = 2 ** 0.5 * math.log(1.25)
    s2 = (s ** 2 + math.log(1.1) ** 2) / 8
    t8 = 2.3060041350333704
    h, h_aa = t8 * math.sqrt(s2 / 2), t8 * math.sqrt(s2)
    # c1: 2.5 in both repeats, interval 2.5 exp(-+h) = [2.07, 3.02]; A/A figure 0: [e^-h_aa, e^h_aa]
    c1 = got[1,]
    assert (c1["ci_low"], c1["ci_high"]) == (approx(2.5 * math.exp(-h)), approx(2.5 * math.exp(h)))
    assert (c1["aa_ci_low"], c1["aa_ci_high"], c1["aa_floor"]) == (
        approx(math.exp(-h_aa)), approx(math.exp(h_aa)), approx(math.exp(h_aa)))
    assert c1["label"] == "faster"  # 2.07 clears the floor 1.31
    assert got[2,]["label"] == "slower"  # 0.4, interval [0.33, 0.48], below 1 / 1.31
    c4 = got[4,]  # ratios 1.25 and 0.8 in the two repeats: the interval contains 1
    assert c4["ci_low"] < 1 < c4["ci_high"] and c4["label"] == "within noise"
    # c8: 1.5 in both repeats, interval [1.24, 1.81] above 1; but the baseline moved by
    # 1/1.1 between its own repeats: A/A interval (1/1.1) exp(-+h_aa), floor 1.1 e^h_aa = 1.44
    c8 = got[8,]
    assert (c8["ci_low"], c8["ci_high"]) == (approx(1.5 * math.exp(-h)), approx(1.5 * math.exp(h)))
    assert (c8["aa_ci_low"], c8["aa_ci_high"], c8["aa_floor"]) == (
        approx(math.exp(-h_aa) / 1.1), approx(math.exp(h_aa) / 1.1), approx(1.1 * math.exp(h_aa)))
    assert c8["label"] == "within noise"


def test_one_repeat_has_no_interval_no_aa_and_says_so(tmp_path, query):
    run_with(tmp_path, steady, repeats=1)
    got = rows_of(query, "select * from speedup", "category", "concurrency")
    code, system = got["code", 1], got["(system)", 1]
    assert code["speedup"] == approx(4.0) and (code["pairs"], code["repeats"]) == (2, 1)
    assert [code[c] for c in ("ci_low", "aa_speedup", "aa_floor", "label")] == [None] * 4
    assert code["aa_pairs"] == 0
    assert code["label_basis"] == "no interval: one pair per prompt; needs --repeats 2 or more"
    assert system["label_basis"] == "no interval: one repeat; needs --repeats 2 or more"
    # prompts are still resampled: the category has two
    assert (code["prompts_ci_low"], code["prompts_ci_high"]) == (approx(2.0), approx(8.0))


KNEE = {1: 3.0, 2: 2.5, 4: 1.25, 8: 0.8}  # code: peak at c1, gain halves by c4, slower at c8


def test_knee(tmp_path, query):
    e2e = lambda arm, pid, level, r: 3000.0 / (1 if arm == "baseline" else (KNEE[level] if pid[:4] == "code"  # noqa
                                                                              else 2.0))
    run_with(tmp_path, e2e, levels=(1, 2, 4, 8))
    got = rows_of(query, "select * from knee", "category")
    code = got["code",]
    # peak 3.0 at c1; gain lost where speedup - 1 < 0.5 x 2.0: c2 has 1.5 (no), c4 0.25 (yes)
    assert (code["peak_speedup"], code["peak_concurrency"], code["peak_fraction"]) == (approx(3.0), 1, 0.5)
    assert code["peak_label"] == "faster"
    assert (code["below_one_concurrency"], code["gain_lost_concurrency"]) == (8, 4)
    assert (code["levels"], code["levels_with_interval"]) == (4, 4)
    # chat: 2.0 at every level -> never below 1, never loses its gain
    assert (got["chat",]["below_one_concurrency"], got["chat",]["gain_lost_concurrency"]) == (None, None)


def test_prefix_cache_hit_rate_per_block(tmp_path, query):
    hits = lambda arm, level, r: 250.0 if (arm, level, r) == ("speculative", 2, 1) else 0.0  # noqa: E731
    run_with(tmp_path, steady, counters=repeated_counters(hits=hits))
    got = rows_of(query, "select * from block_throughput", "arm", "concurrency", "repeat")
    assert len(got) == 8
    assert got["speculative", 2, 1]["prefix_cache_hit_rate"] == approx(0.25)  # 250 of 1000 tokens
    assert got["speculative", 2, 1]["prefix_cache_queries"] == 1000.0
    assert {r["prefix_cache_hit_rate"] for k, r in got.items() if k != ("speculative", 2, 1)} == {0.0}
    assert {r["prefix_cache_reset"] for r in got.values()} == {True}
    # the block's own time: its longest request (chat, 1600 ms)
    assert got["speculative", 2, 1]["block_seconds"] == 1.6


def spec_rounds(requests):
    """One verify round (k = 4, a = 1) per speculative request."""
    return [RoundTrace(run_id=RUN, engine_request_id=f"chatcmpl-{q.request_id}-0123abcd", pid=2,
                       process_token="2-cafe", step_index=i, round_index=1, phase="decode", tokens_proposed=4,
                       tokens_accepted=1, tokens_emitted=2, batch_size=4, num_scheduled_tokens=5, context_len=11,
                       draft_ms=1.0, verify_ms=10.0, wall_time_ns=T0 + i)
            for i, q in enumerate(r for r in requests if r.arm == "speculative")]


def test_reconciliation_compares_each_repeat_with_its_own_snapshots(tmp_path, query):
    reqs = repeated_requests(steady)
    drafts = lambda arm, level, r: 4.0 if arm == "speculative" else None  # noqa: E731
    write_run(tmp_path, requests=reqs, rounds=spec_rounds(reqs), counters=repeated_counters(drafts=drafts))
    got = rows_of(query, "select * from reconciliation", "arm", "concurrency")
    spec = got["speculative", 1]
    # per level, 2 blocks x 4 requests x one round: 8 rounds, 32 proposed, 8 accepted, as the counters say
    assert [spec[c] for c in ("repeats", "captured_rounds", "engine_rounds", "diff_rounds", "diff_proposed",
                              "diff_accepted", "repeats_differing")] == [2, 8, 8, 0, 0, 0, 0]
    assert got["baseline", 1]["engine_counters_present"] is False


def test_reconciliation_names_the_repeats_that_differ(tmp_path, query):
    reqs = repeated_requests(steady)
    # the engine counts one round too many in c2 repeat 0 and one too few in c2 repeat 1
    drafts = lambda arm, level, r: None if arm == "baseline" else 4.0 + (level == 2) * (1 - 2 * r)  # noqa: E731
    write_run(tmp_path, requests=reqs, rounds=spec_rounds(reqs), counters=repeated_counters(drafts=drafts))
    spec = rows_of(query, "select * from reconciliation", "arm", "concurrency")["speculative", 2]
    assert (spec["diff_rounds"], spec["repeats_differing"]) == (0, 2)  # the level's sums cancel, the blocks do not


def test_output_equality_pairs_by_repeat(tmp_path, query):
    text = lambda arm, pid, level, r: "x!" if (arm, pid, r) == ("speculative", "chat-0", 1) else "x"  # noqa: E731
    reqs = repeated_requests(steady, text=text)
    write_run(tmp_path, requests=reqs, rounds=[], counters=repeated_counters())
    got = rows_of(query, "select * from output_equality", "category", "concurrency")
    # 2 prompts x 2 repeats per category and level; one chat pair per level differs (repeat 1)
    assert (got["chat", 1]["pairs"], got["chat", 1]["identical"]) == (4, 3)
    assert (got["code", 2]["pairs"], got["code", 2]["identical"]) == (4, 4)


@pytest.mark.parametrize("level", [1, 2])
def test_pair_index_counts_within_a_repeat(tmp_path, query, level):
    run_with(tmp_path, steady)
    got = query(f"select repeat, max(pair_index) m from int_requests_measured where concurrency = {level} "
                "group by repeat order by repeat")
    assert got == [{"repeat": 0, "m": 0}, {"repeat": 1, "m": 0}]
    # 2 levels x 4 prompts x 2 repeats
    assert query("select count(*) n from int_requests_paired where comparison = 'ab'") == [{"n": 16}]
