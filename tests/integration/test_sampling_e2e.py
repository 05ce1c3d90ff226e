"""The sampling-mode test on the embedded engine (issue 6, item 8; acceptance 3):
one vLLM CPU server, a few open-ended prompts sampled at temperature 1.0 with
seeds, logprobs on; every sample re-scored by teacher forcing on the same
server (``replay/passes/rescore.py``): the real endpoint, the real prompt ids.

What runs against the real engine here is the path: seeded sampling with
logprobs, the re-scoring, the mart's permutation test over real samples. The
test's error rates are not: they are proved on synthetic samples
(tests/analytics/test_sampling.py: test_error_rates_at_the_engine_tests_design), so the design here is the smallest
that exercises the path and keeps the planted defect's detection certain
(issue 40): 4 prompts x 6 seeds = 24 samples of 32 tokens per pass (24 seeds,
then 8, before). Measured at 8 seeds (2026-12-06, vLLM 0.32 CPU, float32): the
0.7-temperature arm's re-scored logprob is higher by T = 33.7 against a
smallest detectable shift of 12.7 (80% power at 0.025, so a standard error of
about 4.1). At 6 seeds the standard error is about sqrt(8/6) larger, 4.7: z
about 7.1. Simulated at that z through this permutation test (3,000 runs
each): 0 misses with normal noise, 0.4% with t(3) tails; at 4 seeds (z 5.8)
0.1% and 1.0%, too many for an engine test. A 0.5-temperature arm, T = 44.3.

- A/A: two passes with two different seed lists (the same seeds on the same
  server would give the same samples, a trivially passing A/A). Both are
  samples of one distribution, so each statistic's p-value is uniform; the
  assertion reads it at 1 in 2,000 per statistic (``AA_FLOOR``, two
  statistics: a false failure in at most 1 run in 1,000), not at the
  verdict's 0.025, which would fail one run in 20. The re-scored sums agree
  with the reported ones (same server, float32).
- A planted defect: a third pass, with a third seed list, samples at
  temperature 0.7 instead of 1.0 ("an arm that samples at a slightly different
  temperature"); the test must reject it on the re-scored logprob (p < 0.025).
  Seen at 96 samples: D = 0.66, p = 2e-18 on the sequence logprob; at 32, on
  the re-scored logprob, p = 1e-4 (the smallest 9,999 relabellings give).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pyarrow as pa
import pytest

from specdec.analytics import sampling_check as st
from specdec.model import eos_ids_for_model
from specdec.replay.passes.rescore import rescore_pass
from specdec.replay.passes.sampling import derive_seeds, sample_pass, sample_table
from specdec.schemas.records import TrafficRow
from tests.support.sampling_mart import mart

pytestmark = pytest.mark.engine

PROMPTS = [
    "Write a short story about a dragon.",
    "Describe your favourite food.",
    "Tell me something about the ocean.",
    "Write a poem about autumn.",
]
ROWS = [
    TrafficRow(prompt_id=f"s{i}", category="chat", prompt=p, max_tokens=32, temperature=1.0)
    for i, p in enumerate(PROMPTS)
]
SEEDS = 6
#: the A/A's p-value floor per statistic (module docstring): 2 x 1/2000 = 1/1000 false failures
AA_FLOOR = 0.0005
LEVEL = 8


@pytest.fixture(scope="module")
def passes(model_dir, vllm_pair):
    """Three sampling passes on one server: (label, temperature override, seed base)."""
    eos = eos_ids_for_model(model_dir)
    url = vllm_pair.baseline.base_url  # float32; its prefix cache kept (no replay empties it meanwhile)

    async def go() -> dict[str, pa.Table]:
        out = {}
        async with aiohttp.ClientSession() as session:
            for label, override, base in (("a1", None, 1), ("a2", None, 2), ("defect", 0.7, 3)):
                results = await sample_pass(
                    session,
                    url,
                    "specdec-target",
                    ROWS,
                    LEVEL,
                    lambda i, label=label: f"sd.sampling.{label}.{i:05d}",
                    None,
                    derive_seeds(base, SEEDS),
                    eos,
                    temperature_override=override,
                )
                await rescore_pass(session, url, "specdec-target", results, LEVEL, by="baseline")
                out[label] = results
        return out

    results = asyncio.run(go())
    return {label: (res, eos) for label, res in results.items()}


def compared(passes, baseline: str, speculative: str) -> dict[str, dict]:
    """The sampling mart's rows for two passes labelled as the two arms."""
    tables = [
        sample_table("sampling", "baseline", LEVEL, passes[baseline][0]),
        sample_table("sampling", "speculative", LEVEL, passes[speculative][0]),
    ]
    rows = mart(pa.concat_tables(tables))
    for r in rows:  # shown with -s: the figures behind the verdicts
        print(
            f"{baseline} vs {speculative} {r['statistic']}: T={r['mean_difference']:.3f} p={r['p_value']:.4g} "
            f"n={r['n_baseline']}/{r['n_speculative']} means {r['mean_baseline']:.2f}/{r['mean_speculative']:.2f} "
            f"min shift {r['min_detectable_shift']:.3f} distinct {r['distinct_share_speculative']} "
            f"reported-rescored {r['reported_minus_rescored_speculative']} -> {r['verdict']}"
        )
    return {r["statistic"]: r for r in rows}


def test_every_sample_succeeded_with_logprobs(passes):
    for label, (results, eos) in passes.items():
        assert eos, "the model folder names its end-of-sequence ids"
        assert len(results) == len(ROWS) * SEEDS, label
        bad = [(r.stream.error_type, r.stream.error_message) for _, r in results if not r.stream.success]
        assert not bad, (label, bad[:3])
        assert all(len(r.emitted_logprobs) == 32 for _, r in results)
    # different seeds give different samples (else the A/A below would be trivial)
    a1 = {(row.prompt_id, r.sample_index): r.token_ids for row, r in passes["a1"][0]}
    a2 = {(row.prompt_id, r.sample_index): r.token_ids for row, r in passes["a2"][0]}
    assert sum(a1[k] != a2[k] for k in a1) > len(a1) // 2


def test_aa_with_two_seed_lists_is_not_rejected(passes):
    rows = compared(passes, "a1", "a2")
    assert set(rows) == {"rescored_logprob", "sequence_logprob", "natural_length"}
    for stat in ("rescored_logprob", "natural_length"):
        r = rows[stat]
        assert r["n_baseline"] == r["n_speculative"] == len(ROWS) * SEEDS, stat
        assert r["p_value"] >= AA_FLOOR, (stat, r["p_value"], r["verdict"])
        assert r["verdict"] in (st.SAME, st.DIFFERS) and r["permutations"] > 0, (stat, r["verdict"])
        assert r["distinct_share_baseline"] == r["distinct_share_speculative"] == 1.0
    for arm in ("baseline", "speculative"):  # one server: its re-scores are its reports
        assert abs(rows["rescored_logprob"][f"reported_minus_rescored_{arm}"]) < 1e-3
        assert rows["rescored_logprob"][f"not_rescored_{arm}"] == 0


def test_an_arm_sampling_at_a_slightly_lower_temperature_is_detected(passes):
    rows = compared(passes, "a1", "defect")
    lp = rows["rescored_logprob"]
    assert lp["p_value"] < st.ALPHA and lp["verdict"] == st.DIFFERS, lp["p_value"]
    assert lp["mean_speculative"] > lp["mean_baseline"]  # cooler sampling picks likelier tokens
