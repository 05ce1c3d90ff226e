"""The outcome rules of specdec/experiments/compat/classify.py, one small hand-made evidence each."""

from __future__ import annotations

from specdec.experiments.compat.classify import Acceptance, Evidence, classify, divergence, escape, with_capture
from specdec.experiments.compat.quant import QuantArm, QuantMeasure, quant_cell
from specdec.experiments.compat.send import Choice, Reply
from specdec.experiments.compat.validity import ArmReplies


def arm(text: str = "ok", *, error: str | None = None, status: int = 200) -> ArmReplies:
    reply = Reply(status, error, [] if error else [Choice(text)], 2)
    return ArmReplies([reply], Reply(200, None, [Choice("plain")], 2))


def ev(
    b=None,
    s=None,
    bv=(True, "valid"),
    sv=(True, "valid"),
    feature=None,
    plain=None,
    identity=True,
):
    both = Acceptance(8, 6, 2)
    return Evidence(identity, b or arm(), s or arm(), bv, sv, feature or both, plain or both)


def test_works_when_valid_identical_and_speculating():
    out = classify(ev())
    assert (
        out.outcome == "works" and out.identical is True and "acceptance per token 0.75 (plain twin 0.75)" in out.detail
    )


def test_refused_by_the_baseline_is_not_offered_whatever_the_speculative_arm_did():
    out = classify(ev(b=arm(error="no such field", status=400), bv=(None, "refused")))
    assert out.outcome == "not offered" and "HTTP 400: no such field" in out.detail
    assert "the speculative arm accepted it" in out.detail


def test_refused_by_the_speculative_arm_only_quotes_the_error_escaped():
    out = classify(ev(s=arm(error='bad "tools"\nline2', status=422), sv=(None, "refused")))
    assert out.outcome == "refused"
    assert out.detail.endswith('HTTP 422: bad \\"tools\\"\\nline2')


def test_invalid_in_both_arms_is_not_offered_in_one_arm_broken():
    assert classify(ev(bv=(False, "x"), sv=(False, "y"))).outcome == "not offered"
    assert classify(ev(sv=(False, "y"))).outcome == "broken"
    assert classify(ev(bv=(False, "x"))).outcome == "broken"


def test_a_greedy_divergence_is_broken_a_sampled_one_is_not_compared():
    out = classify(ev(s=arm("oh")))
    assert out.outcome == "broken" and out.identical is False
    assert (
        out.first_divergence_char
        == divergence('[{"text": "ok", "tool_calls": []}]', '[{"text": "oh", "tool_calls": []}]')
        == 12  # the normalized output: [{"text": "o|k
    )
    sampled = classify(ev(s=arm("oh"), identity=False))
    assert sampled.outcome == "works" and sampled.identical is None


def test_degrades_when_no_draft_with_the_feature_or_acceptance_halves():
    out = classify(ev(feature=Acceptance(0, 0, 0)))
    assert out.outcome == "degrades" and "no draft token with the feature (8 on the plain twin)" in out.detail
    # 2/8 = 0.25 < 0.5 * 0.75: degrades, by x0.33
    out = classify(ev(feature=Acceptance(8, 2, 2)))
    assert out.outcome == "degrades" and "0.25 with the feature against 0.75 without (x0.33)" in out.detail
    # 4/8 = 0.5 >= 0.375: works
    assert classify(ev(feature=Acceptance(8, 4, 2))).outcome == "works"


def test_a_cell_where_nothing_was_drafted_is_never_works():
    """Issue 43, item 1: works needs the speculative arm to have drafted in the cell. Before, both cells
    below were works ("the gain is not tested here"; "acceptance not measured (no counters)")."""
    # nothing drafted with or without the feature: the probe could not make the engine draft
    out = classify(ev(feature=Acceptance(0, 0, 0), plain=Acceptance(0, 0, 0)))
    assert out.outcome == "not tested", out.detail
    assert "no draft token with the feature nor on the plain twin" in out.detail and out.identical is True
    # the twin's counters unread, none drafted with the feature
    out = classify(ev(feature=Acceptance(0, 0, 0), plain=Acceptance()))
    assert out.outcome == "not tested" and "the plain twin's counters not read" in out.detail
    # no counters at all (an external server without /metrics), greedy or sampled
    for identity in (True, False):
        out = classify(ev(feature=Acceptance(), plain=Acceptance(), identity=identity))
        assert out.outcome == "not tested" and "counters were not read" in out.detail
    # the twin drafted, the feature did not: still degrades (the feature stops speculation)
    assert classify(ev(feature=Acceptance(0, 0, 0), plain=Acceptance(8, 6, 2))).outcome == "degrades"
    # drafted, acceptance not exported: works, drafting seen
    out = classify(ev(feature=Acceptance(8, None, 2), plain=Acceptance(8, None, 2)))
    assert out.outcome == "works" and "not measured (8 draft tokens proposed)" in out.detail


def test_a_not_tested_cell_keeps_its_outcome_through_the_speed_rule():
    """The speed rule reads only works cells: a slow cell that drafted nothing stays not tested."""
    slow = (0.5, 0.4, 0.6, 3)  # the feature's speedup over the twin's, wholly below 1 / 1.10
    none = Acceptance(0, 0, 0)
    e = Evidence(
        True, arm(), arm(), (True, "valid"), (True, "valid"), none, none, (1.0, 0.9, 1.1, 3), (2.0, 1.9, 2.1, 3), slow
    )
    out = classify(e)
    assert out.outcome == "not tested" and out.detail.startswith("speedup x")
    drafting = Acceptance(8, 6, 2)
    e = Evidence(True, arm(), arm(), (True, "valid"), (True, "valid"), drafting, drafting, None, None, slow)
    assert classify(e).outcome == "degrades"


def test_capture_in_one_arm_only_breaks_a_not_tested_cell_and_never_makes_it_works():
    none = {"spec_num_draft_tokens": 0, "spec_num_accepted_tokens": 0, "spec_num_drafts": 0}
    ok = Reply(200, None, [Choice("a")], 48, 10.0)
    cell = quant_cell("t", "v", ("Q4_1", 4), QuantArm("ngram-mod"), QuantMeasure([ok], [ok], none, 2), None)
    assert cell.outcome == "not tested"
    assert with_capture(cell, None, None, None).outcome == "not tested"  # not captured: unchanged
    assert with_capture(cell, True, True, "both reconcile").outcome == "not tested"
    broken = with_capture(cell, True, False, "rows say 8 draft tokens, counters 0")
    assert broken.outcome == "broken" and "was not tested" in broken.detail


def test_escape_keeps_one_line_and_cuts():
    assert escape("a\nb\u00e9") == "a\\nb\\u00e9"
    assert escape("x" * 400, limit=10) == "x" * 10 + "..."


def test_a_divergence_without_any_draft_is_broken_but_not_blamed_on_speculation():
    """Seen on llama.cpp (2026-12-03, the 'on' session's turn 3): the speculative arm drafted nothing,
    the baseline's reused prompt cache gave another greedy text."""
    out = classify(ev(s=arm("oh"), feature=Acceptance(0, 0, 0)))
    assert out.outcome == "broken" and "the divergence is not speculation's own" in out.detail
    assert "not speculation's own" not in classify(ev(s=arm("oh"))).detail  # drafts were proposed
