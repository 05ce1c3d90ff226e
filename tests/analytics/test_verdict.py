"""The verdict in words, from hand-built mart rows: change the data, the
sentence changes."""

from __future__ import annotations

import re

from specdec.analytics.report.verdict import (
    calibration_sentence,
    category_sentence,
    lossless_sentence,
    row_anchor,
    verdict,
)

BASIS = "99.6% family-wise interval (step-down over 12 labels) against 1 and the 5% margin"


def row(
    conc,
    speedup,
    lo,
    hi,
    label,
    cat="code",
    pairs=24,
    prompts=12,
    repeats=2,
    excluded=None,
    level=0.99,
    clears=None,
    detect=None,
    needed=None,
    noise=None,
):
    return dict(
        category=cat,
        level=conc,
        speedup=speedup,
        ci_low=lo,
        ci_high=hi,
        label=label,
        ci_level=level if lo is not None else None,
        label_basis=BASIS if label else None,
        pairs=pairs,
        prompts=prompts,
        repeats=repeats,
        excluded_reason=excluded,
        margin=0.05,
        family_size=12,
        clears_margin=clears,
        detectable_effect=detect,
        repeats_needed=needed,
        noise_ratio=None if noise is None else noise[0],
        noise_p_value=None if noise is None else noise[1],
        noise_check=None if noise is None else noise[2],
    )


CODE = [
    row(1, 2.4, 2.2, 2.6, "faster", clears=True),
    row(4, 1.8, 1.7, 1.9, "faster", clears=True),
    row(8, 1.02, 0.95, 1.1, "inconclusive", detect=0.08, needed=9),
]


def test_faster_up_to_a_concurrency_then_inconclusive():
    s = category_sentence("code", CODE)
    assert s.text == (
        "code: faster up to concurrency 4: 2.40x (99% CI 2.20-2.60) at c1, 1.80x (99% CI 1.70-1.90) "
        "at c4, each gain beyond the 5% margin; inconclusive: 1.02x (99% CI 0.95-1.10) at c8; this run "
        "cannot tell effects smaller than about 8% from none; --repeats 9 would resolve +-5% "
        "[n = 24 pairs per level: 12 prompts x 2 repeats]."
    )
    # every figure links to its own speedup row
    linked = {p.text: p.anchor for p in s.parts if p.anchor}
    assert linked["2.40x (99% CI 2.20-2.60) at c1"] == row_anchor("speedup", "code", 1)
    assert linked["1.02x (99% CI 0.95-1.10) at c8"] == row_anchor("speedup", "code", 8)


def test_the_sentence_follows_the_labels():
    slower = CODE[:2] + [row(8, 0.9, 0.85, 0.95, "slower", clears=False)]
    assert (
        "; slower: 0.90x (99% CI 0.85-0.95) at c8 (the loss may be under the 5% margin) ["
        in category_sentence("code", slower).text
    )
    tost = {**row(1, 0.99, 0.58, 1.75, "equivalent"), "equivalence_low": 0.96, "equivalence_high": 1.02}
    # the interval `equivalent` was read from leads, the family-wise one follows
    assert "(TOST 0.96-1.02; 99% CI 0.58-1.75) at c1" in category_sentence("code", [tost]).text
    same = [row(c, 1.0, 0.97, 1.03, "equivalent") for c in (1, 4, 8)]
    assert category_sentence("code", same).text.startswith(
        "code: equivalent to off at every level (within +-5%): 1.00x (99% CI 0.97-1.03) at c1"
    )
    gap = [
        row(1, 2.0, 1.5, 2.5, "faster", clears=True),
        row(4, 1.0, 0.9, 1.1, "inconclusive", needed=101),
        row(8, 1.6, 1.02, 2.0, "faster", clears=False),
    ]
    text = category_sentence("code", gap).text
    assert text.startswith(
        "code: faster: 2.00x (99% CI 1.50-2.50) at c1, 1.60x (99% CI 1.02-2.00) at c8 "
        "(at c8 the gain may be under the 5% margin); inconclusive: 1.00x"
    )
    assert "(more than 100 repeats would be needed to resolve +-5%)" in text


def test_the_chat_case_reads_as_its_intervals_say():
    """Issue 19's first line, with the labels the new rule gives those intervals: an interval
    wholly below 1 is 'slower', one that holds 1 is 'inconclusive' (never 'within noise')."""
    chat = [
        row(1, 0.92, 0.84, 1.01, "inconclusive", cat="chat", detect=0.09, needed=6),
        row(4, 0.85, 0.78, 0.93, "slower", cat="chat", clears=True),
        row(8, 0.87, 0.80, 0.95, "slower", cat="chat", clears=True),
    ]
    text = category_sentence("chat", chat).text
    assert text.startswith(
        "chat: inconclusive: 0.92x (99% CI 0.84-1.01) at c1; this run cannot tell effects "
        "smaller than about 9% from none; --repeats 6 would resolve +-5%; slower: 0.85x (99% CI "
        "0.78-0.93) at c4, 0.87x (99% CI 0.80-0.95) at c8, each loss beyond the 5% margin"
    )
    assert "noise" not in text


def test_no_interval_and_excluded_levels_are_said():
    one = [
        row(1, 2.5, None, None, None, pairs=2, prompts=2, repeats=1),
        dict(row(2, None, None, None, None), excluded_reason="baseline level failed (error rate 0.500 > max 0.050)"),
    ]
    one[0]["label_basis"] = "no interval: one pair per prompt; needs --repeats 2 or more"
    text = category_sentence("code", one).text
    assert text == (
        "code: 2.50x at c1 (no interval: one pair per prompt; needs --repeats 2 or more); no figure at c2 "
        "(baseline level failed (error rate 0.500 > max 0.050)) [n = 2 pairs per level: 2 prompts x "
        "1 repeat]."
    )
    failed = "speculative level failed (error rate 1.000 > max 0.050)"
    more = one + [dict(one[1], level=c, excluded_reason=failed) for c in (4, 8)]
    assert "; no figure at c4, c8 (" + failed + ") [" in category_sentence("code", more).text


def test_the_calibration_sentence_is_quiet_unless_a_level_is_noisier():
    fits = [dict(r, noise_ratio=1.1, noise_p_value=0.4, noise_check="fits") for r in CODE] + [
        row(c, 1.0, 0.9, 1.1, "inconclusive", cat="chat", noise=(0.8, 0.4, "fits")) for c in (1, 4, 8)
    ]
    s = calibration_sentence(fits)
    assert s.text == (
        "calibration: one variance per category fits every level (no level's block figures spread more than "
        "the others' at a 5% family-wise error rate; 3 levels tested); labels hold a 5% family-wise error rate "
        "over 12 labels with a 5% margin declared before the run."
    )
    assert "care" not in s.text and "too narrow" not in s.text
    # c4 noisier: said with each flagged category's SD ratio (largest first), the p-value, and what it means
    noisy = [
        dict(r, noise_check="noisier", noise_ratio=2.6, noise_p_value=0.0012) if r["level"] == 4 else r for r in fits
    ]
    noisy = [dict(r, noise_ratio=3.1) if r["level"] == 4 and r["category"] == "chat" else r for r in noisy]
    s = calibration_sentence(noisy)
    assert s.text == (
        "calibration: c4 is noisier than the intervals assume: its block figures vary 3.1x (chat), 2.6x (code) "
        "as much as at the other levels (p = 0.0012, Holm over 3 levels, 5% family-wise), so the intervals at "
        "c4 are too narrow and its labels less certain than their level says (the other levels' intervals "
        "somewhat too wide); labels hold a 5% family-wise error rate over 12 labels with a 5% margin "
        "declared before the run."
    )
    assert any(p.anchor == row_anchor("speedup", "chat", 4) for p in s.parts)  # the noisiest row, linked
    # an open-loop level is named as the run names it
    assert "at 2 rps are too narrow" in calibration_sentence(noisy, names={4: "2 rps"}).text
    # no check and no label: no sentence; labels alone: the labels' part alone
    assert calibration_sentence([row(1, 2.5, None, None, None)]) is None
    assert calibration_sentence(CODE).text.startswith("calibration: labels hold a 5% family-wise")


def test_knee_clause():
    knee = dict(
        category="code",
        peak_speedup=2.4,
        peak_level=1,
        peak_label="faster",
        peak_fraction=0.5,
        gain_lost_level=8,
    )
    s = category_sentence("code", CODE, knee)
    assert "; gain below 50% of its peak (2.40x at c1) from c8 [" in s.text
    assert any(p.anchor == row_anchor("knee", "code") for p in s.parts)
    # a peak that is not 'faster' is no gain to lose: nothing said
    assert "gain below" not in category_sentence("code", CODE, dict(knee, peak_label="inconclusive")).text


LOSSLESS = [
    dict(
        category="code",
        level=1,
        dtype="bfloat16",
        pairs=48,
        identical=28,
        near_tie=20,
        suspect=0,
        aa_pairs=24,
        aa_identical=15,
        near_tie_threshold=0.05,
    ),
    dict(
        category="chat",
        level=4,
        dtype="bfloat16",
        pairs=48,
        identical=28,
        near_tie=20,
        suspect=0,
        aa_pairs=24,
        aa_identical=16,
        near_tie_threshold=0.05,
    ),
]


def test_lossless_sentence_and_its_change():
    s = lossless_sentence(LOSSLESS, "float32")
    assert s.text == (
        "lossless: 0 suspect divergences in 96 greedy pairs (bfloat16, c1-c4; 56/96 identical, "
        "40 near-ties (the baseline's runner-up, margin at most 0.05 nats); A/A floor 31/48 identical)."
    )
    assert s.parts[0].anchor == row_anchor("lossless") == "lossless-table"
    worse = [dict(LOSSLESS[0], near_tie=17, suspect=3), LOSSLESS[1]]
    s = lossless_sentence(worse, "float32")
    assert s.text.startswith("lossless: 3 suspect divergences in 96 greedy pairs")
    assert s.parts[0].anchor == row_anchor("lossless_divergences")  # the list of every divergence
    # a calibrated threshold says where it comes from; a level whose pass did not speculate is not counted
    calibrated = [
        dict(r, near_tie_threshold_source="aa_divergences", near_tie_threshold_divergences=6, pass_valid=True)
        for r in LOSSLESS
    ]
    assert "margin at most 0.05 nats: the largest of 6 A/A flips)" in lossless_sentence(calibrated, None).text
    floor = [dict(r, near_tie_threshold_source="dtype_floor", near_tie_threshold_divergences=2) for r in LOSSLESS]
    assert "the bfloat16 default, which the run's 2 A/A flips stayed within)" in lossless_sentence(floor, None).text
    half = [calibrated[0], dict(calibrated[1], pass_valid=False)]
    text = lossless_sentence(half, None).text
    assert text.startswith("lossless: 0 suspect divergences in 48 greedy pairs (bfloat16, c1;")
    assert text.endswith(
        "; c4 not counted: speculation did not run during its lossless pass (draft counters unchanged))."
    )
    none = lossless_sentence([dict(r, pass_valid=False) for r in calibrated], None).text
    assert none == (
        "lossless: not shown (speculation did not run during the lossless pass at c1-c4: the "
        "speculative arm's draft counters did not move)."
    )
    # no lossless pass: said, not zero
    assert lossless_sentence([dict(LOSSLESS[0], pairs=None)], "bfloat16").text.startswith("lossless: not verified")


def test_verdict_orders_categories_then_system_then_lossless():
    rows = CODE + [
        row(1, 1.0, 0.9, 1.1, "inconclusive", cat="chat"),
        row(1, 2.0, 1.8, 2.2, "faster", cat="(system)", repeats=2),
    ]
    texts = [s.text for s in verdict(rows, [], LOSSLESS, "bfloat16")]
    assert [t.split(":")[0] for t in texts] == ["chat", "code", "(system)", "calibration", "lossless"]
    assert len(verdict(rows)) == 4  # no lossless mart: no lossless sentence


def test_row_anchor_is_inert_and_distinct():
    hostile = row_anchor("speedup", '"><script>', 1)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", hostile)
    assert row_anchor("speedup", "a b", 1) != row_anchor("speedup", "a-b", 1)


def test_a_large_detectable_effect_reads_as_a_plain_percent():
    from specdec.analytics.report.verdict import _resolution

    text = _resolution([{"detectable_effect": 2.1, "repeats_needed": 150, "margin": 0.05}])
    assert "about 210% from none" in text and "e+" not in text
    assert "about 1.2% from none" in _resolution([{"detectable_effect": 0.012, "repeats_needed": 0, "margin": 0.05}])
