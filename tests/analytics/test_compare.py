"""specdec compare: two runs' marts side by side, on hand-checkable runs."""

from __future__ import annotations

import json

from click.testing import CliRunner
from pytest import approx

from specdec.analytics.report.compare import compare, settings_diff
from specdec.cli.main import main
from specdec.schemas.records import ArmConfig
from tests.support.synthetic_run import RUN, make_manifest, repeated_counters, repeated_requests, round_row, write_run

SPEC = {"code-0": 1000.0, "code-1": 500.0, "chat-0": 1600.0, "chat-1": 1700.0}


def rounds(plan):
    """Rounds of the speculative code-0 request of repeat 0 at level 1 (sequence 0)."""
    eid = f"chatcmpl-sd.{RUN}.speculative.c1.r0.00000-0123abcd"
    return [round_row(eid, 2, 1, 0, 0, 0, phase="prefill")] + [
        round_row(eid, 2, 1 + i, i, k, a) for i, (k, a) in enumerate(plan, start=1)
    ]


def two_runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    e2e_a = lambda arm, pid, level, r: 2000.0 if arm == "baseline" else SPEC[pid]  # noqa: E731

    # B: code twice as fast again with speculation (a better draft), chat unchanged
    def e2e_b(arm, pid, level, r):
        return e2e_a(arm, pid, level, r) / (2 if arm == "speculative" and pid[:4] == "code" else 1)

    k8 = ArmConfig(
        name="speculative",
        speculative_config={"method": "ngram", "num_speculative_tokens": 8},
        server_args=["--model", "m"],
        endpoint="http://127.0.0.1:8002",
    )
    base = make_manifest().arms[0]
    write_run(
        a,
        requests=repeated_requests(e2e_a, levels=(1,)),
        counters=repeated_counters(levels=(1,)),
        rounds=rounds([(4, 4), (4, 2)]),
    )
    write_run(
        b,
        requests=repeated_requests(e2e_b, levels=(1,)),
        counters=repeated_counters(levels=(1,)),
        rounds=rounds([(8, 0), (8, 0)]),
        manifest=make_manifest(arms=[base, k8]),
    )
    return a, b


def test_speedup_acceptance_and_settings_side_by_side(tmp_path):
    a, b = two_runs(tmp_path)
    c = compare(a, b)
    fields = {s["field"]: (s["a"], s["b"]) for s in c.settings}
    assert fields["arms[1].speculative_config.num_speculative_tokens"] == (4, 8)
    assert "run_id" not in fields and "created_wall" not in fields
    sp = {(r["category"], r["level"]): r for r in c.speedup}
    code, chat = sp["code", 1], sp["chat", 1]
    assert code["a_speedup"] == approx(2 * 2**0.5)  # geometric mean of 2 and 4
    assert code["b_over_a"] == approx(2.0) and chat["b_over_a"] == approx(1.0)
    # every repeat alike: zero-width intervals, so code's do not overlap and chat's do
    assert code["overlap"] is False and chat["overlap"] is True
    assert [r["category"] for r in c.speedup][-1] == "(system)"
    acc = {r["category"]: r for r in c.acceptance}
    assert (acc["code"]["a_length"], acc["code"]["b_length"]) == (approx(4.0), approx(1.0))  # B accepted nothing
    assert acc["code"]["length_b_minus_a"] == approx(-3.0) and acc["code"]["rate_b_minus_a"] == approx(-0.75)
    assert {(r["arm"], r["level"]) for r in c.throughput} == {("baseline", 1), ("speculative", 1)}


def test_cli_text_and_json(tmp_path):
    a, b = two_runs(tmp_path)
    text = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert text.exit_code == 0, text.output
    assert "arms[1].speculative_config.num_speculative_tokens  4" in text.output
    code_line = next(line for line in text.output.splitlines() if line.strip().startswith("code"))
    assert "2.000" in code_line and "NO" in code_line  # B/A, intervals do not overlap
    out = CliRunner().invoke(main, ["compare", str(a), str(b), "--json"])
    assert out.exit_code == 0
    data = json.loads(out.output)
    assert set(data) == {"run_a", "run_b", "settings", "speedup", "acceptance", "throughput", "request_acceptance"}
    missing = CliRunner().invoke(main, ["compare", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "nope" in missing.output


def test_settings_diff_ignores_identity_and_time():
    m1, m2 = make_manifest(), make_manifest(run_id="other", created_wall="2030-01-01T00:00:00Z")
    assert settings_diff(m1, m2) == []
    assert settings_diff(m1, make_manifest(dtype="bfloat16")) == [{"field": "dtype", "a": "float32", "b": "bfloat16"}]


def test_a_run_without_rounds_compares_on_the_per_request_stats(tmp_path):
    """B is an engine without per-round rows (llama.cpp): its acceptance by round is
    n/a, and the per-request stats compare for both runs: A's speculative requests
    report 10 drafted, 5 accepted each; B's 10 and 8."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    e2e = lambda arm, pid, level, r: 2000.0 if arm == "baseline" else 1000.0  # noqa: E731

    def with_stats(accepted):
        return [
            r.model_copy(update={"spec_num_draft_tokens": 10, "spec_num_accepted_tokens": accepted})
            if r.arm == "speculative"
            else r
            for r in repeated_requests(e2e, levels=(1,))
        ]

    write_run(a, requests=with_stats(5), counters=repeated_counters(levels=(1,)), rounds=rounds([(4, 4)]))
    write_run(b, requests=with_stats(8), counters=repeated_counters(levels=(1,)), rounds=[])
    c = compare(a, b)
    assert {r["category"]: r["b_length"] for r in c.acceptance}["code"] is None
    got = {(r["category"], r["level"]): r for r in c.request_acceptance}
    assert (got["(all)", 1]["a_rate"], got["(all)", 1]["b_rate"]) == (approx(0.5), approx(0.8))
    assert got["code", 1]["rate_b_minus_a"] == approx(0.3)
