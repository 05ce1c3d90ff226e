"""Runs with repeats (see conftest: repeated_requests): the paired speedup, its
intervals, the calibration check, the labels, the knee, per-block throughput and
prefix cache, and pairing by repeat in the other marts."""

from __future__ import annotations

import math

import pytest
from pytest import approx

from specdec.analytics.variance import t_quantile, t_sf
from specdec.schemas.records import RoundTrace
from tests.support.synthetic_run import RUN, T0, repeated_counters, repeated_requests, write_run


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
    got = rows_of(query, "select * from speedup where category = 'code'", "level")[(1,)]
    # pairs: 2 prompts x 2 repeats; ratios 2, 8, 2, 8 -> geometric mean 4
    assert (got["speedup"], got["pairs"], got["prompts"], got["repeats"]) == (approx(4.0), 4, 2, 2)
    # the old mean of rates: baseline 50 and 100 tokens/s (mean 75), speculative 100 and 800 (mean 450): 6
    assert got["speedup_mean_of_rates"] == approx(6.0)
    assert got["definition"] == "geometric mean of paired e2e ratios"
    # every repeat alike: zero-width measurement interval (no run-to-run noise at all)
    assert (got["ci_low"], got["ci_high"]) == (approx(4.0), approx(4.0))
    assert (got["pointwise_ci_low"], got["pointwise_ci_high"]) == (approx(4.0), approx(4.0))
    # prompts and runs: prompt means ln 2 and ln 8, s2_prompt = 2 (ln 2)^2, se^2 = 0 + s2_prompt / 2,
    # df 1 (two prompts): 4 x 2^(-+t(0.975, 1))
    t1 = t_quantile(0.975, 1)
    assert (got["prompts_ci_low"], got["prompts_ci_high"]) == (approx(4 * 2**-t1), approx(4 * 2**t1))
    # A/A: the baseline repeats are identical -> 1, 2 pairs (one per prompt)
    assert (got["aa_speedup"], got["aa_pairs"]) == (approx(1.0), 2)
    # the calibration check: no block figure moves at any level, nothing to test
    assert (got["noise_ratio"], got["noise_p_value"], got["noise_check"]) == (None, None, None)
    # 6 labels in the run (code, chat, (system) at c1 and c2), every one clear: p = 0
    assert (got["label"], got["clears_margin"], got["family_size"], got["margin"]) == ("faster", True, 6, 0.05)
    assert 0.95 < got["ci_level"] < 1 and got["p_value"] == 0.0
    assert got["label_basis"] == (
        f"{100 * got['ci_level']:.4g}% family-wise interval (step-down over 6 labels) against 1 and the 5% margin"
    )


def test_system_speedup_is_per_repeat_and_blocks_never_span_each_other(tmp_path, query):
    # baseline 2000 ms in repeat 0, 4000 ms in repeat 1; speculative 1000 and 500 ms
    def e2e(arm, pid, level, r):
        return {
            ("baseline", 0): 2000,
            ("baseline", 1): 4000,
            ("speculative", 0): 1000,
            ("speculative", 1): 500,
        }[arm, r]

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
    # One level: residuals +-ln 2 about ln 4, V = 2 (ln 2)^2 with df 1 (two repeats say nothing
    # more), so the pointwise interval is ln 4 +- t(0.975, 1) sqrt(V / 2) = 4 x 2^(-+12.7): two
    # repeats that differ 4x measure next to nothing
    t1 = t_quantile(0.975, 1)
    assert (sys["speedup"], sys["pointwise_ci_low"], sys["pointwise_ci_high"], sys["pairs"], sys["repeats"]) == (
        approx(4.0),
        approx(4 * 2**-t1),
        approx(4 * 2**t1),
        2,
        2,
    )
    assert sys["df"] == approx(1.0)
    # every group of the run (code, chat, (system)) has those figures: t = 2, p = 2 P(T1 > 2); two
    # repeats leave no df to read how the rows move together (counted as independent), so the
    # step-down is Sidak's (exact for independent rows): it rejects none and each interval is at 0.95^(1/3)
    p = 2 * t_sf(2.0, 1)
    assert (sys["p_value"], sys["family_size"]) == (approx(p), 3)
    assert sys["ci_level"] == approx(0.95 ** (1 / 3))
    t_fam = t_quantile((1 + sys["ci_level"]) / 2, 1)
    assert (sys["ci_low"], sys["ci_high"]) == (approx(4 * 2**-t_fam), approx(4 * 2**t_fam))
    assert sys["label"] == "inconclusive" and sys["repeats_needed"] == 101
    # the A/A figure: ln 0.5 (the baseline halved its speed), a description of the drift, no check
    assert (sys["aa_speedup"], sys["aa_pairs"]) == (approx(0.5), 1)
    # the calibration check leaves '(system)' out (built from the same requests as the categories)
    assert (sys["noise_ratio"], sys["noise_p_value"], sys["noise_check"]) == (None, None, None)


LABELS = {1: 2.5, 2: 0.4, 4: None, 8: 1.5}  # speculative ratio per level (None: 1.25, 0.8, 1.0 by repeat)


def labelled(arm, pid, level, r):
    base = 2000.0
    if level == 8 and r == 1:  # the host slows at c8 repeat 1: both arms 1.1x slower
        base = 2200.0
    if arm == "baseline":
        return base
    ratio = LABELS[level] if LABELS[level] is not None else (1.25, 0.8, 1.0)[r]
    return base / ratio


def test_labels_from_the_family_wise_interval_and_the_margin(tmp_path, query):
    run_with(tmp_path, labelled, levels=(1, 2, 4, 8), repeats=3)
    got = rows_of(query, "select * from speedup where category = 'code'", "level")
    # Each series (code, chat, (system)) has the same block figures: only c4 moves between repeats
    # (ln 1.25, ln 0.8, 0 = a, -a, 0). The calibration check sets c4 apart (p = 0 <= the pooling
    # test's 10%), so c4 has a block variance of its own, V4 = 2 a^2 / (R - 1) = a^2 with R - 1 = 2
    # df, and c1, c2 and c8 pool theirs: no spread at all, V = 0 (issue 41: before it, c4's spread
    # was pooled into every level). The arm order is the same in every block here: not fitted.
    a, repeats = math.log(1.25), 3
    c1 = got[1,]
    assert (c1["df"], c1["pointwise_ci_low"], c1["pointwise_ci_high"]) == (approx(8.0), approx(2.5), approx(2.5))
    # The step-down over 12 labels: c1, c2 and c8 in the three series have p = 0, the nine largest |z|;
    # all pass. The three series move together at every level (the same figures: residual correlation
    # 1), so the 12 rows count as 4 independent ones: c1's level is Sidak's for 4 (0.95^(1/4)), not
    # Holm's 1 - 0.05 / 12; c4 (centre 0, p = 1) is left, its three rows as one: drawn at 95%
    assert (c1["p_value"], got[8,]["p_value"], c1["family_size"]) == (0.0, 0.0, 12)
    assert c1["ci_level"] == approx(0.95 ** (1 / 4), abs=1e-3)
    assert c1["label"] == "faster" and c1["clears_margin"] is True
    assert got[2,]["label"] == "slower" and got[2,]["ci_high"] < 1
    c8 = got[8,]  # 1.5 in every repeat: faster at its step-down level
    assert 0.95 < c8["ci_level"] <= c1["ci_level"] and c8["label"] == "faster"
    c4 = got[4,]  # 1.25, 0.8, 1.0: centred on 1, too wide to be equivalent
    se, df = math.sqrt(a * a / repeats), 2.0
    assert c4["df"] == approx(df)
    assert c4["ci_level"] == approx(0.95, abs=1e-3)
    h3 = t_quantile((1 + c4["ci_level"]) / 2, df) * se
    assert (c4["ci_low"], c4["ci_high"]) == (approx(math.exp(-h3)), approx(math.exp(h3)))
    assert c4["label"] == "inconclusive" and c4["detectable_effect"] == approx(math.expm1(h3))
    assert c4["repeats_needed"] > repeats
    # The calibration check: only c4's block figures move, so c4 is noisier than one variance per
    # category allows (the other levels do not vary at all: p = 0, an unbounded SD ratio), in code and
    # in chat alike; the host slowed both arms 1.1x at c8 in repeat 1, which cancels in the pairs: c8 fits
    assert c8["aa_speedup"] == approx(1.0)
    assert (c4["noise_check"], c4["noise_p_value"], c4["noise_ratio"]) == ("noisier", 0.0, math.inf)
    assert {lv: got[lv,]["noise_check"] for lv in (1, 2, 8)} == {1: "fits", 2: "fits", 8: "fits"}
    assert {r["noise_ratio"] for lv, r in got.items() if lv != (4,)} == {0.0}
    chat = rows_of(query, "select * from speedup where category = 'chat'", "level")
    assert [chat[lv,]["noise_check"] for lv in (1, 2, 4, 8)] == ["fits", "fits", "noisier", "fits"]
    sys = rows_of(query, "select * from speedup where category = '(system)'", "level")
    assert {r["noise_check"] for r in sys.values()} == {None}


def test_a_label_never_contradicts_its_interval(tmp_path, query):
    """The chat case of issue 19, rebuilt: 0.92x, 0.85x and 0.87x at c1, c4 and c8 over two
    repeats with a few percent of noise, beside a code category that is clearly faster. The old
    rule called the chat rows "within noise" over intervals wholly below 1. Now every row's label
    is the one its own interval gives: wholly below 1 -> slower, wholly above -> faster."""
    ratio = {
        ("chat", 1): 0.92,
        ("chat", 4): 0.85,
        ("chat", 8): 0.87,
        ("code", 1): 2.4,
        ("code", 4): 1.8,
        ("code", 8): 1.4,
    }
    wobble = {0: 1.02, 1: 0.98}

    def e2e(arm, pid, level, r):
        if arm == "baseline":
            return 2000.0 * (1.03 if r else 1.0)
        return (
            2000.0
            * (1.03 if r else 1.0)
            / (ratio[pid.split("-")[0], level] * wobble[r] * (1.01 if pid.endswith("1") else 0.99))
        )

    run_with(tmp_path, e2e, levels=(1, 4, 8))
    rows = query("select * from speedup where label is not null")
    assert len(rows) == 9
    for r in rows:
        expected = (
            "faster"
            if r["ci_low"] > 1
            else "slower"
            if r["ci_high"] < 1
            else "equivalent"
            if 1 / 1.05 <= r["ci_low"] and r["ci_high"] <= 1.05
            else "inconclusive"
        )
        assert r["label"] == expected, r
        assert r["ci_low"] <= r["pointwise_ci_low"] and r["pointwise_ci_high"] <= r["ci_high"]


def test_one_repeat_has_no_interval_no_aa_and_says_so(tmp_path, query):
    run_with(tmp_path, steady, repeats=1)
    got = rows_of(query, "select * from speedup", "category", "level")
    code, system = got["code", 1], got["(system)", 1]
    assert code["speedup"] == approx(4.0) and (code["pairs"], code["repeats"]) == (2, 1)
    assert [code[c] for c in ("ci_low", "aa_speedup", "noise_check", "label", "ci_level")] == [None] * 5
    assert code["aa_pairs"] == 0
    assert code["label_basis"] == "no interval: one pair per prompt; needs --repeats 2 or more"
    assert system["label_basis"] == "no interval: one repeat; needs --repeats 2 or more"
    # no prompts-and-runs interval either: one repeat says nothing of run-to-run noise
    assert (code["prompts_ci_low"], code["prompts_ci_high"]) == (None, None)


KNEE = {1: 3.0, 2: 2.5, 4: 1.25, 8: 0.8}  # code: peak at c1, gain halves by c4, slower at c8


def test_knee(tmp_path, query):
    def e2e(arm, pid, level, r):
        return 3000.0 / (
            1
            if arm == "baseline"
            else (
                KNEE[level]
                if pid[:4] == "code"  # noqa
                else 2.0
            )
        )

    run_with(tmp_path, e2e, levels=(1, 2, 4, 8))
    got = rows_of(query, "select * from knee", "category")
    code = got["code",]
    # peak 3.0 at c1; gain lost where speedup - 1 < 0.5 x 2.0: c2 has 1.5 (no), c4 0.25 (yes)
    assert (code["peak_speedup"], code["peak_level"], code["peak_fraction"]) == (approx(3.0), 1, 0.5)
    assert code["peak_label"] == "faster"
    assert (code["below_one_level"], code["gain_lost_level"]) == (8, 4)
    assert (code["levels"], code["levels_with_interval"]) == (4, 4)
    # chat: 2.0 at every level -> never below 1, never loses its gain
    assert (got["chat",]["below_one_level"], got["chat",]["gain_lost_level"]) == (None, None)


def test_prefix_cache_hit_rate_per_block(tmp_path, query):
    hits = lambda arm, level, r: 250.0 if (arm, level, r) == ("speculative", 2, 1) else 0.0  # noqa: E731
    run_with(tmp_path, steady, counters=repeated_counters(hits=hits))
    got = rows_of(query, "select * from block_throughput", "arm", "level", "repeat")
    assert len(got) == 8
    assert got["speculative", 2, 1]["prefix_cache_hit_rate"] == approx(0.25)  # 250 of 1000 tokens
    assert got["speculative", 2, 1]["prefix_cache_queries"] == 1000.0
    assert {r["prefix_cache_hit_rate"] for k, r in got.items() if k != ("speculative", 2, 1)} == {0.0}
    assert {r["prefix_cache_reset"] for r in got.values()} == {True}
    # the block's own time: its longest request (chat, 1600 ms)
    assert got["speculative", 2, 1]["block_seconds"] == 1.6


def spec_rounds(requests):
    """One verify round (k = 4, a = 1) per speculative request."""
    return [
        RoundTrace(
            run_id=RUN,
            engine_request_id=f"chatcmpl-{q.request_id}-0123abcd",
            pid=2,
            process_token="2-cafe",
            step_index=i,
            round_index=1,
            phase="decode",
            tokens_proposed=4,
            tokens_accepted=1,
            tokens_emitted=2,
            batch_size=4,
            num_scheduled_tokens=5,
            context_len=11,
            draft_ms=1.0,
            verify_ms=10.0,
            wall_time_ns=T0 + i,
        )
        for i, q in enumerate(r for r in requests if r.arm == "speculative")
    ]


def test_reconciliation_compares_each_repeat_with_its_own_snapshots(tmp_path, query):
    reqs = repeated_requests(steady)
    drafts = lambda arm, level, r: 4.0 if arm == "speculative" else None  # noqa: E731
    write_run(tmp_path, requests=reqs, rounds=spec_rounds(reqs), counters=repeated_counters(drafts=drafts))
    got = rows_of(query, "select * from reconciliation", "arm", "level")
    spec = got["speculative", 1]
    # per level, 2 blocks x 4 requests x one round: 8 rounds, 32 proposed, 8 accepted, as the counters say
    assert [
        spec[c]
        for c in (
            "repeats",
            "captured_rounds",
            "engine_rounds",
            "diff_rounds",
            "diff_proposed",
            "diff_accepted",
            "repeats_differing",
        )
    ] == [2, 8, 8, 0, 0, 0, 0]
    assert got["baseline", 1]["engine_counters_present"] is False


def test_reconciliation_names_the_repeats_that_differ(tmp_path, query):
    reqs = repeated_requests(steady)
    # the engine counts one round too many in c2 repeat 0 and one too few in c2 repeat 1
    drafts = lambda arm, level, r: None if arm == "baseline" else 4.0 + (level == 2) * (1 - 2 * r)  # noqa: E731
    write_run(tmp_path, requests=reqs, rounds=spec_rounds(reqs), counters=repeated_counters(drafts=drafts))
    spec = rows_of(query, "select * from reconciliation", "arm", "level")["speculative", 2]
    assert (spec["diff_rounds"], spec["repeats_differing"]) == (0, 2)  # the level's sums cancel, the blocks do not


def test_output_equality_pairs_by_repeat(tmp_path, query):
    text = lambda arm, pid, level, r: "x!" if (arm, pid, r) == ("speculative", "chat-0", 1) else "x"  # noqa: E731
    reqs = repeated_requests(steady, text=text)
    write_run(tmp_path, requests=reqs, rounds=[], counters=repeated_counters())
    got = rows_of(query, "select * from output_equality", "category", "level")
    # 2 prompts x 2 repeats per category and level; one chat pair per level differs (repeat 1)
    assert (got["chat", 1]["pairs"], got["chat", 1]["identical"]) == (4, 3)
    assert (got["code", 2]["pairs"], got["code", 2]["identical"]) == (4, 4)


@pytest.mark.parametrize("level", [1, 2])
def test_pair_index_counts_within_a_repeat(tmp_path, query, level):
    run_with(tmp_path, steady)
    got = query(
        f"select repeat, max(pair_index) m from int_requests_measured where level = {level} "
        "group by repeat order by repeat"
    )
    assert got == [{"repeat": 0, "m": 0}, {"repeat": 1, "m": 0}]
    # 2 levels x 4 prompts x 2 repeats
    assert query("select count(*) n from int_requests_paired where comparison = 'ab'") == [{"n": 16}]
