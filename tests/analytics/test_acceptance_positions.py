"""Marts acceptance_positions and acceptance_by_context on hand-checkable rounds."""

from __future__ import annotations

from pytest import approx

from tests.support.synthetic_run import request_id, round_row, with_position_counter, write_run

# one speculative code request at c1: its verify rounds (k proposed, a accepted)
ROUNDS = [(4, 4), (4, 2), (4, 0), (3, 1), (2, 2), (0, 0)]  # the last: a decode step with no draft


def rounds(context=lambda rnd: 10 + rnd):
    eid = f"chatcmpl-{request_id('speculative', 1, 'code')}-0123abcd"
    rows = [round_row(eid, 2, 1, 0, 0, 0, phase="prefill")]
    for rnd, (k, a) in enumerate(ROUNDS, start=1):
        r = round_row(eid, 2, 1 + rnd, rnd, k, a)
        rows.append(r.model_copy(update={"context_len": context(rnd)}))
    return rows


def test_per_position_acceptance_and_first_rejection(tmp_path, query):
    write_run(tmp_path, rounds=rounds())
    got = {
        r["position"]: r
        for r in query("select * from acceptance_positions where arm = 'speculative' and category = 'code'")
    }
    assert sorted(got) == [1, 2, 3, 4]  # the largest k proposed
    # 5 verify rounds; accepted >= i: i=1: 4 rounds (all but (4,0)); i=2: (4,4),(4,2),(2,2);
    # i=3: (4,4); i=4: (4,4)
    assert [got[i]["accepted"] for i in (1, 2, 3, 4)] == [4, 3, 1, 1]
    assert [got[i]["rounds_reaching"] for i in (1, 2, 3, 4)] == [5, 5, 4, 3]  # k >= i
    assert {r["verify_rounds"] for r in got.values()} == {5}
    assert [got[i]["acceptance_at_position"] for i in (1, 2, 3, 4)] == [
        approx(0.8),
        approx(0.6),
        approx(0.2),
        approx(0.2),
    ]
    # conditional: position 2 given k >= 2 and position 1 accepted: 4 such rounds, 3 accepted;
    # position 3: k >= 3 and a >= 2: (4,4), (4,2): 1 of 2; position 4: (4,4) only: 1 of 1
    assert [got[i]["conditional_acceptance"] for i in (1, 2, 3, 4)] == [
        approx(0.8),
        approx(0.75),
        approx(0.5),
        approx(1.0),
    ]
    # first rejection: (4,0) at 1, (3,1) at 2, (4,2) at 3; (4,4) and (2,2) accepted everything
    assert [got[i]["first_rejections"] for i in (1, 2, 3, 4)] == [1, 1, 1, 0]
    assert got[1]["all_accepted_share"] == approx(0.4)
    assert sum(r["first_rejection_share"] for r in got.values()) + got[1]["all_accepted_share"] == approx(1.0)
    # the invariant: per-position rates sum to the mean acceptance length - 1
    (acc,) = query("select * from acceptance where arm = 'speculative' and category = 'code'")
    assert sum(r["acceptance_at_position"] for r in got.values()) == approx(acc["mean_acceptance_length"] - 1)
    assert acc["mean_acceptance_length"] == approx(1 + 9 / 5)


def test_the_invariant_holds_on_every_group_of_the_fixture_run(run_dir, query):
    sums = query("select arm, category, sum(acceptance_at_position) as s from acceptance_positions group by all")
    acc = {(r["arm"], r["category"]): r["mean_acceptance_length"] for r in query("select * from acceptance")}
    assert sums
    for r in sums:
        assert r["s"] == approx(acc[r["arm"], r["category"]] - 1)


def test_acceptance_by_context_bucket(tmp_path, query):
    # rounds 1-3 at context 100-300, 4-5 at 600 and 5000; the no-draft step is not a round
    ctx = {1: 100, 2: 200, 3: 300, 4: 600, 5: 5000, 6: 5001}
    write_run(tmp_path, rounds=rounds(lambda rnd: ctx[rnd]))
    got = {
        r["context_bucket"]: r
        for r in query("select * from acceptance_by_context where arm = 'speculative' and category = 'code'")
    }
    assert list(got) == ["0-255", "256-511", "512-1023", "4096+"]
    low = got["0-255"]  # (4,4), (4,2): 6 accepted of 8, 2 rounds
    assert (low["verify_rounds"], low["context_low"], low["context_high"]) == (2, 0, 256)
    assert (low["mean_acceptance_length"], low["acceptance_rate"]) == (approx(4.0), approx(0.75))
    assert low["tokens_per_round"] == approx(4.0)  # emitted = accepted + 1: 5 and 3
    assert (got["256-511"]["mean_acceptance_length"], got["256-511"]["context_high"]) == (approx(1.0), 512)
    assert got["512-1023"]["acceptance_rate"] == approx(1 / 3)
    top = got["4096+"]
    assert (top["verify_rounds"], top["context_low"], top["context_high"], top["acceptance_rate"]) == (
        1,
        4096,
        None,
        approx(1.0),
    )


def test_per_position_acceptance_from_the_engine_counter_equals_the_rounds(tmp_path, query):
    # per level the captured rounds are (4,4) (4,2) (4,0) (4,1) (4,0): accepted >= 1: 3, >= 2: 2, >= 3: 1, >= 4: 1
    write_run(tmp_path, with_position_counter([3, 2, 1, 1]))
    got = query("select * from acceptance_positions_engine order by level, position")
    assert [(r["level"], r["position"]) for r in got] == [(c, p) for c in (1, 2) for p in (1, 2, 3, 4)]
    assert {r["arm"] for r in got} == {"speculative"}  # the baseline server exports no such counter
    c1 = [r for r in got if r["level"] == 1]
    assert [r["engine_accepted"] for r in c1] == [3, 2, 1, 1] and {r["engine_rounds"] for r in c1} == {5}
    assert [r["acceptance_at_position"] for r in c1] == [approx(0.6), approx(0.4), approx(0.2), approx(0.2)]
    assert all(r["captured_accepted"] == r["engine_accepted"] and r["diff_accepted"] == 0 for r in got)
    # the invariant, from the counter alone: the rates sum to accepted / rounds = 7 / 5
    assert sum(r["acceptance_at_position"] for r in c1) == approx(7 / 5)
    assert {(r["engine_accepted_total"], r["covers_every_position"]) for r in c1} == {(7, True)}


def test_a_counter_of_the_first_positions_only_is_flagged(tmp_path, query):
    # llama.cpp's counter covers the first few positions of longer drafts: here 2 of 4
    counters = with_position_counter([3, 2])
    write_run(tmp_path, counters, rounds=[])
    got = query("select * from acceptance_positions_engine where level = 1 order by position")
    assert [r["position"] for r in got] == [1, 2]
    assert {(r["engine_accepted_total"], r["covers_every_position"]) for r in got} == {(7, False)}


def test_the_counter_disagreeing_with_the_rounds_shows_as_a_diff(tmp_path, query):
    write_run(tmp_path, with_position_counter([3, 2, 2, 1]))
    got = {(r["level"], r["position"]): r["diff_accepted"] for r in query("select * from acceptance_positions_engine")}
    assert got[1, 3] == -1 and got[2, 3] == -1 and got[1, 1] == 0


def test_without_captured_rounds_the_counter_still_gives_per_position_acceptance(tmp_path, query):
    write_run(tmp_path, with_position_counter([3, 2, 1, 1]), rounds=[])  # an engine without per-round rows
    got = query("select * from acceptance_positions_engine where level = 1 order by position")
    assert [r["acceptance_at_position"] for r in got] == [approx(0.6), approx(0.4), approx(0.2), approx(0.2)]
    assert {r["captured_accepted"] for r in got} == {None} and {r["diff_accepted"] for r in got} == {None}
