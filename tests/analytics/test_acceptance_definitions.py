"""Mart acceptance_definitions: one set of rounds under every definition, by hand."""

from __future__ import annotations

from pytest import approx

from tests.support.synthetic_run import make_requests, request_id, round_row, write_run

# speculative code request: rounds (k, a) (4,4), (4,0) and a no-draft step;
# speculative chat request: (4,1), (4,1), (4,1), (4,1)
PLAN = {"code": [(4, 4), (4, 0), (0, 0)], "chat": [(4, 1)] * 4}


def rounds():
    rows, step = [], 0
    for cat, plan in PLAN.items():
        eid = f"chatcmpl-{request_id('speculative', 1, cat)}-0123abcd"
        step += 1
        rows.append(round_row(eid, 2, step, 0, 0, 0, phase="prefill"))
        for rnd, (k, a) in enumerate(plan, start=1):
            step += 1
            rows.append(round_row(eid, 2, step, rnd, k, a))
    return rows


def test_every_definition_on_the_same_rounds(tmp_path, query):
    write_run(tmp_path, rounds=rounds(), requests=make_requests())  # output_tokens 100 per request
    got = {r["category"]: r for r in query("select * from acceptance_definitions where arm = 'speculative'")}
    assert list(got) == ["chat", "code", "(all)"]
    code, both = got["code"], got["(all)"]
    assert (code["verify_rounds"], code["decode_steps_no_draft"], code["rounds_all_rejected"]) == (2, 1, 1)
    assert code["vllm_mean_acceptance_length"] == approx(1 + 4 / 2)
    assert code["vllm_draft_acceptance_rate"] == approx(4 / 8)
    assert code["aiperf_accepted_per_verified"] == approx((5 + 1) / (5 + 5))
    assert code["specbench_mean_accepted_tokens"] == approx((5 + 1 + 1) / 3)  # the k = 0 step emits 1
    assert code["sglang_accept_length"] == approx(100 / 2)
    # pooled over both requests: 8 accepted in 6 rounds; per request: code 3.0, chat 2.0 -> 2.5
    assert both["vllm_mean_acceptance_length"] == approx(1 + 8 / 6)
    assert both["aiperf_acceptance_length_per_request"] == approx(2.5)
    assert both["vllm_draft_acceptance_rate"] == approx(8 / 24)
    assert both["acceptance_rate_per_request"] == approx((0.5 + 0.25) / 2)
    assert both["macro_over_categories_length"] == approx((3.0 + 2.0) / 2)
    assert code["macro_over_categories_length"] is None
    assert both["sglang_accept_length"] == approx(200 / 6) and both["requests"] == 2
    # the pooled and per-request definitions disagree on the same rounds, as the field's reports do
    assert both["vllm_mean_acceptance_length"] != approx(both["aiperf_acceptance_length_per_request"])
