"""The quantization cells (specdec/experiments/compat/quant.py): measured against the fake
pair of tests/support/compat_server.py (each speculative request: 2 rounds, 8 draft
tokens, 6 accepted), and classified from hand-made replies."""

from __future__ import annotations

import asyncio
import math

import aiohttp
import pytest

from specdec.experiments.compat import classify
from specdec.experiments.compat.quant import (
    QUANT_PROMPTS,
    QuantArm,
    QuantMeasure,
    classify_quant,
    failed,
    measure,
    probe_name,
    quant_cell,
    speedup,
)
from specdec.experiments.compat.send import Choice, Reply
from specdec.experiments.compat.timing import DEFAULT_REPEATS
from specdec.experiments.compat.validity import ArmReplies
from specdec.http.urls import ClientSettings, parse_endpoint
from tests.support.compat_server import CompatFake, fake_pair

SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
DRAFT4 = QuantArm("draft-simple", "Q4_1", 4)


def measured(baseline: CompatFake, speculative: CompatFake) -> QuantMeasure:
    async def go():
        async with fake_pair(baseline, speculative) as (b, s), aiohttp.ClientSession() as session:
            return await measure(
                session, parse_endpoint(b), parse_endpoint(s), SETTINGS, "m", "compat.t.q", None, settle_s=0.0
            )

    return asyncio.run(go())


def reply(text: str, ms: float) -> Reply:
    return Reply(200, None, [Choice(text, [], "length")], 48, ms)


def test_a_cell_measured_on_an_honest_pair_works_with_its_acceptance_and_speedup():
    spec = CompatFake(True)
    m = measured(CompatFake(False), spec)
    pairs = len(QUANT_PROMPTS) * DEFAULT_REPEATS
    # one warm-up per arm, not counted in the counters' difference
    assert m.requests == 2 + 2 * pairs
    assert len(spec.bodies) == 1 + pairs
    cell = quant_cell("t", "v", ("Q8_0", 8), DRAFT4, m, classify.Acceptance(8, 8, 2))
    assert cell.probe == "target-q8_0.draft-q4_1" and cell.feature == "quantization"
    assert (cell.draft_tokens, cell.accepted_tokens, cell.drafts) == (8 * pairs, 6 * pairs, 2 * pairs)
    assert (cell.plain_draft_tokens, cell.plain_accepted_tokens) == (8, 8)
    assert cell.outcome == "works", cell.detail
    assert cell.identical is True and cell.speedup_pairs == pairs and cell.speedup is not None
    assert "acceptance per token 0.75 (36/48), mean acceptance length 4.00 over 12 rounds" in cell.detail
    assert (cell.target_quant, cell.target_bits, cell.draft_quant, cell.draft_bits) == ("Q8_0", 8, "Q4_1", 4)
    # every request greedy at the forced length
    assert all(b["temperature"] == 0 and b["ignore_eos"] and b["max_tokens"] == 48 for b in spec.bodies)


def test_a_cell_without_drafts_where_the_reference_had_some_degrades():
    m = measured(CompatFake(False), CompatFake(True, no_drafts_with="ignore_eos"))
    cell = quant_cell("t", "v", ("F16", 16), QuantArm("ngram-mod"), m, classify.Acceptance(40, 30, 10))
    assert cell.probe == "target-f16.ngram-mod" and cell.draft_quant is None
    assert cell.outcome == "degrades" and "no draft token (40 on the shipped target)" in cell.detail


def test_a_cell_whose_counters_never_move_is_not_tested_on_any_target():
    """Issue 43: a speculative server that never drafts gave works on the shipped target (no reference)."""
    m = measured(CompatFake(False), CompatFake(True, no_drafts_with="messages"))
    assert m.counters is not None and classify.Acceptance.of(m.counters).draft_tokens == 0
    for target, ref in ((("Q4_1", 4), None), (("Q8_0", 8), classify.Acceptance(0, 0, 0))):
        cell = quant_cell("t", "v", target, DRAFT4, m, ref)
        assert cell.outcome == "not tested", cell.detail
        assert "no draft token proposed" in cell.detail and cell.identical is True


def test_the_speedup_is_the_geometric_mean_of_paired_ratios_with_a_t_interval():
    base = [reply("a", 200.0), reply("a", 400.0)]
    spec = [reply("a", 100.0), reply("a", 100.0)]  # ratios 2 and 4
    sp, lo, hi, n = speedup(base, spec)
    assert n == 2 and sp == pytest.approx(math.sqrt(8))
    half = 12.706204736 * (math.log(4) - math.log(2)) / math.sqrt(2) / math.sqrt(2)  # t(0.975, 1) * sd / sqrt(n)
    assert lo == pytest.approx(math.exp((math.log(2) + math.log(4)) / 2 - half))
    assert hi == pytest.approx(math.exp((math.log(2) + math.log(4)) / 2 + half))
    assert speedup([reply("a", 200.0)], [reply("a", 100.0)]) == (2.0, None, None, 1)
    assert speedup([Reply(None, "down")], [reply("a", 1.0)]) == (None, None, None, 0)


@pytest.mark.parametrize(
    "base, spec, acc, ref, outcome, says",
    [
        ([reply("a", 1)], [reply("a", 1)], classify.Acceptance(10, 9, 3), classify.Acceptance(10, 9, 3), "works", ""),
        ([reply("ab", 1)], [reply("ac", 1)], classify.Acceptance(10, 9, 3), None, "broken", "at character 12"),
        (
            [reply("a", 1)],
            [reply("a", 1)],
            classify.Acceptance(10, 2, 3),
            classify.Acceptance(10, 9, 3),
            "degrades",
            "0.20 against 0.90",
        ),
        (
            [reply("a", 1)],
            failed("llama-server exited with code 1 during start-up"),
            classify.Acceptance(),
            None,
            "refused",
            "exited with code 1",
        ),
        (failed("llama-server exited"), failed("not started"), classify.Acceptance(), None, "not offered", "exited"),
        # issue 43: no draft token, and no reference that drafted (the shipped target's own cell): not tested,
        # never works (it was works before)
        ([reply("a", 1)], [reply("a", 1)], classify.Acceptance(0, 0, 0), None, "not tested", "no draft token"),
        (
            [reply("a", 1)],
            [reply("a", 1)],
            classify.Acceptance(0, 0, 0),
            classify.Acceptance(0, 0, 0),
            "not tested",
            "nor on the shipped target",
        ),
        ([reply("a", 1)], [reply("a", 1)], classify.Acceptance(), None, "not tested", "nothing shows"),
        (
            [reply("a", 1)],
            [reply("a", 1)],
            classify.Acceptance(0, 0, 0),
            classify.Acceptance(10, 9, 3),
            "degrades",
            "10 on the shipped target",
        ),
    ],
)
def test_classify_quant(base, spec, acc, ref, outcome, says):
    got, detail, _, _ = classify_quant(ArmReplies(base, None), ArmReplies(spec, None), acc, ref)
    assert got == outcome and says in detail


def test_a_speculative_server_that_did_not_start_is_refused_with_its_error():
    m = QuantMeasure([reply("a", 100.0)], failed("llama-server exited with code 1:\nbad draft"), None, 2)
    cell = quant_cell("t", "v", ("Q4_1", 4), QuantArm("draft-simple", "Q8_0", 8), m, None)
    assert cell.outcome == "refused" and cell.speculative_error == "llama-server exited with code 1:\nbad draft"
    assert "bad draft" in cell.detail and "\\n" in cell.detail  # escaped on one line
    assert cell.baseline_accepted and not cell.speculative_accepted and cell.speedup is None


def test_probe_names_are_unique_per_target_and_arm():
    arms = [DRAFT4, QuantArm("draft-simple", "Q8_0", 8), QuantArm("ngram-mod")]
    names = {probe_name(t, a) for t in ("Q4_1", "Q8_0", "F16") for a in arms}
    assert len(names) == 9 and "target-q4_1.ngram-mod" in names


def test_the_reports_quantization_table_orders_cells_and_labels_their_intervals():
    from specdec.analytics.report.compat import quant_table
    from specdec.analytics.report.data import Table

    cols = (
        "feature", "spec_method", "target_quant", "target_bits", "draft_quant", "draft_bits", "outcome",
        "acceptance_rate", "mean_acceptance_length", "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_pairs",
    )  # fmt: skip
    rows = (
        ("quantization", "ngram-mod", "F16", 16, None, None, "works", 1.0, 29.0, 1.28, 0.59, 2.78, 6),
        ("quantization", "draft-simple", "Q4_1", 4, "Q8_0", 8, "works", 0.878, 3.52, 0.5, 0.252, 0.994, 6),
        ("quantization", "draft-simple", "Q4_1", 4, "Q4_1", 4, "works", 0.954, 3.71, 0.402, 0.332, 0.488, 6),
        ("sampling", "ngram-mod", None, None, None, None, "works", None, None, None, None, None, None),
    )
    t = quant_table(Table(cols, rows))
    assert [r[:3] for r in t.rows] == [
        ("Q4_1 (4-bit)", "draft Q4_1 (4-bit)", "works"),
        ("Q4_1 (4-bit)", "draft Q8_0 (8-bit)", "works"),
        ("F16 (16-bit)", "ngram-mod", "works"),
    ]
    assert [r[6:8] for r in t.rows] == [
        ("0.33-0.49", "slower"),
        ("0.25-0.99", "slower"),
        ("0.59-2.78", "inconclusive"),
    ]
