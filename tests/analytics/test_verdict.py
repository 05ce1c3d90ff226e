"""The verdict in words, from hand-built mart rows: change the data, the
sentence changes."""

from __future__ import annotations

import re

from specdec.analytics.verdict import category_sentence, lossless_sentence, row_anchor, verdict

FULL = "measurement interval against 1 and the A/A floor"


def row(conc, speedup, lo, hi, label, cat="code", pairs=24, prompts=12, repeats=2, basis=FULL, excluded=None):
    return dict(category=cat, concurrency=conc, speedup=speedup, ci_low=lo, ci_high=hi, label=label,
                label_basis=basis if label else None, pairs=pairs, prompts=prompts, repeats=repeats,
                excluded_reason=excluded)


CODE = [row(1, 2.4, 2.2, 2.6, "faster"), row(4, 1.8, 1.7, 1.9, "faster"), row(8, 1.02, 0.95, 1.1, "within noise")]


def test_faster_up_to_a_concurrency_then_within_noise():
    s = category_sentence("code", CODE)
    assert s.text == ("code: faster up to concurrency 4: 2.40x (95% CI 2.20-2.60) at c1, 1.80x (95% CI 1.70-1.90) "
                      "at c4; within noise: 1.02x (95% CI 0.95-1.10) at c8 "
                      "[n = 24 pairs per level: 12 prompts x 2 repeats].")
    # every figure links to its own speedup row
    linked = {p.text: p.anchor for p in s.parts if p.anchor}
    assert linked["2.40x (95% CI 2.20-2.60) at c1"] == row_anchor("speedup", "code", 1)
    assert linked["1.02x (95% CI 0.95-1.10) at c8"] == row_anchor("speedup", "code", 8)


def test_the_sentence_follows_the_labels():
    slower = CODE[:2] + [row(8, 0.9, 0.85, 0.95, "slower")]
    assert "; slower: 0.90x (95% CI 0.85-0.95) at c8 [" in category_sentence("code", slower).text
    noise = [row(c, 1.0, 0.9, 1.1, "within noise") for c in (1, 4, 8)]
    assert category_sentence("code", noise).text.startswith("code: within noise at every level: 1.00x")
    gap = [row(1, 2.0, 1.5, 2.5, "faster"), row(4, 1.0, 0.9, 1.1, "within noise"), row(8, 1.6, 1.2, 2.0, "faster")]
    assert category_sentence("code", gap).text.startswith("code: faster: 2.00x (95% CI 1.50-2.50) at c1, 1.60x")


def test_no_interval_and_excluded_levels_are_said():
    one = [row(1, 2.5, None, None, None, pairs=2, prompts=2, repeats=1),
           dict(row(2, None, None, None, None), excluded_reason="baseline level failed (error rate 0.500 > max 0.050)")]
    one[0]["label_basis"] = "no interval: one pair per prompt; needs --repeats 2 or more"
    text = category_sentence("code", one).text
    assert text == ("code: 2.50x at c1 (no interval: one pair per prompt; needs --repeats 2 or more); no figure at c2 "
                    "(baseline level failed (error rate 0.500 > max 0.050)) [n = 2 pairs per level: 2 prompts x "
                    "1 repeat].")
    failed = "speculative level failed (error rate 1.000 > max 0.050)"
    more = one + [dict(one[1], concurrency=c, excluded_reason=failed) for c in (4, 8)]
    assert "; no figure at c4, c8 (" + failed + ") [" in category_sentence("code", more).text


def test_a_label_without_aa_floor_says_so():
    basis = "measurement interval against 1; no A/A floor, needs 2 repeats"
    s = category_sentence("(system)", [row(1, 3.0, 2.0, 4.0, "faster", cat="(system)", basis=basis)])
    assert s.text.endswith("[n = 2 repeats per level, whole-level throughput; labels from " + basis + "].")


def test_knee_clause():
    knee = dict(category="code", peak_speedup=2.4, peak_concurrency=1, peak_label="faster", peak_fraction=0.5,
                gain_lost_concurrency=8)
    s = category_sentence("code", CODE, knee)
    assert "; gain below 50% of its peak (2.40x at c1) from c8 [" in s.text
    assert any(p.anchor == row_anchor("knee", "code") for p in s.parts)
    # a peak within noise is no gain to lose: nothing said
    assert "gain below" not in category_sentence("code", CODE, dict(knee, peak_label="within noise")).text


LOSSLESS = [dict(category="code", concurrency=1, dtype="bfloat16", pairs=48, identical=28, near_tie=20, suspect=0,
                 aa_pairs=24, aa_identical=15, near_tie_threshold=0.05),
            dict(category="chat", concurrency=4, dtype="bfloat16", pairs=48, identical=28, near_tie=20, suspect=0,
                 aa_pairs=24, aa_identical=16, near_tie_threshold=0.05)]


def test_lossless_sentence_and_its_change():
    s = lossless_sentence(LOSSLESS, "float32")
    assert s.text == ("lossless: 0 suspect divergences in 96 greedy pairs (bfloat16, c1-c4; 56/96 identical, "
                      "40 near-ties (margin at most 0.05); A/A floor 31/48 identical).")
    assert s.parts[0].anchor == row_anchor("lossless") == "lossless-table"
    worse = [dict(LOSSLESS[0], near_tie=17, suspect=3), LOSSLESS[1]]
    s = lossless_sentence(worse, "float32")
    assert s.text.startswith("lossless: 3 suspect divergences in 96 greedy pairs")
    assert s.parts[0].anchor == row_anchor("lossless_divergences")  # the list of every divergence
    # no verification pass: said, not zero
    assert lossless_sentence([dict(LOSSLESS[0], pairs=None)], "bfloat16").text.startswith("lossless: not verified")


def test_verdict_orders_categories_then_system_then_lossless():
    rows = CODE + [row(1, 1.0, 0.9, 1.1, "within noise", cat="chat"),
                   row(1, 2.0, 1.8, 2.2, "faster", cat="(system)", repeats=2)]
    texts = [s.text for s in verdict(rows, [], LOSSLESS, "bfloat16")]
    assert [t.split(":")[0] for t in texts] == ["chat", "code", "(system)", "lossless"]
    assert len(verdict(rows)) == 3  # no lossless mart: no lossless sentence


def test_row_anchor_is_inert_and_distinct():
    hostile = row_anchor("speedup", '"><script>', 1)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", hostile)
    assert row_anchor("speedup", "a b", 1) != row_anchor("speedup", "a-b", 1)
