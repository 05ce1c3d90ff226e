"""Mart acceptance_requests on hand-checkable rows: acceptance from the engine's
per-request stats, and their reconciliation with the engine's counters, with
and without per-round data (an engine without the capture plugin: llama.cpp)."""

from __future__ import annotations

from pytest import approx

from tests.support.synthetic_run import make_counters, make_requests, write_run


def rows(query) -> dict:
    return {
        (r["level"], r["category"]): r for r in query("select * from acceptance_requests where arm = 'speculative'")
    }


def test_rates_from_the_requests_stats_and_a_zero_difference_with_the_counters(run_dir, query):
    """Per level: code 3 verify steps, 12 proposed, 6 accepted; chat 2 steps, 8 and 1.
    The counters move by 20 proposed and 7 accepted per level (the warm-up round is
    before the first before-snapshot)."""
    got = rows(query)
    code, chat, both = got[1, "code"], got[1, "chat"], got[1, "(all)"]
    assert (code["tokens_proposed"], code["tokens_accepted"], code["steps"]) == (12, 6, 3)
    assert code["acceptance_rate"] == approx(0.5) and chat["acceptance_rate"] == approx(1 / 8)
    assert both["acceptance_rate"] == approx(7 / 20)
    assert both["acceptance_rate_per_request"] == approx((0.5 + 1 / 8) / 2)  # the mean of the two requests' rates
    assert (both["engine_proposed"], both["engine_accepted"], both["diff_proposed"], both["diff_accepted"]) == (
        20,
        7,
        0,
        0,
    )
    assert code["engine_proposed"] is None  # the counters are per level, not per category
    assert not query("select * from acceptance_requests where arm = 'baseline'")  # no stats: no rows, not zeros


def test_without_rounds_the_stats_still_answer_and_a_missing_draft_count_shows(tmp_path, query):
    """llama.cpp's shape: no per-round rows, no step counts; one speculative request
    lost its stats (NULL: left out, not counted as 0), so the counters show 4 proposed
    and 1 accepted that no request reports (the chat request at c2)."""
    requests = []
    for r in make_requests():
        if r.arm == "speculative":
            r = r.model_copy(update={"spec_num_steps": None})
            if (r.level, r.category) == (2, "chat"):
                r = r.model_copy(update={"spec_num_draft_tokens": None, "spec_num_accepted_tokens": None})
        requests.append(r)
    write_run(tmp_path, make_counters(), requests=requests, rounds=[])
    got = rows(query)
    assert got[1, "(all)"]["steps"] is None and got[1, "(all)"]["diff_accepted"] == 0
    c2 = got[2, "(all)"]
    assert (c2["requests_with_stats"], c2["tokens_proposed"], c2["tokens_accepted"]) == (1, 12, 6)
    assert (c2["diff_proposed"], c2["diff_accepted"]) == (12 - 20, 6 - 7)
    assert (2, "chat") not in got
    assert not query("select * from acceptance where arm = 'speculative'")  # no rounds: nothing by round
