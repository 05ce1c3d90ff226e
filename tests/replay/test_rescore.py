"""The sampling check with one instrument (issue 19, item 5): each sample's token
ids and the prompt's, re-scored by teacher forcing on the reference server,
and the whole check (sampling pass -> re-scoring -> SampleCheck table ->
sampling mart) against fake servers that really sample: an honest pair
passes, a shifted distribution fails, a seed-ignoring arm is flagged "samples
not distinct", and a reporting artefact is not taken for a sampling defect."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from specdec.analytics import sampling_check as st
from specdec.arms import NGRAM, ArmSpec
from specdec.replay.passes.rescore import instrument_arm, rescore_body, rescore_one, rescore_pass, rescored_sum
from specdec.replay.passes.sampling import derive_seeds, sample_pass, sample_table
from specdec.schemas.records import SampleCheck, TrafficRow
from tests.support.fake_sampler import EOS, FakeSampler, prompt_token_ids, raw_logprobs
from tests.support.fake_server import FakeVllm, serving
from tests.support.sampling_mart import by_stat, mart

ROWS = [
    TrafficRow(prompt_id=f"p{i}", category="chat", prompt=f"Tell me story number {i}", max_tokens=16, temperature=1.0)
    for i in range(4)
]
SEEDS = derive_seeds(0, 16)


# ------------------------------------------------------------------ pieces
def test_rescored_sum_reads_the_generated_positions_only():
    # prompt of 2 tokens, then generated 7 and 9: positions 2 and 3
    reply = {
        "choices": [
            {
                "prompt_logprobs": [
                    None,
                    {"5": {"logprob": -9.0}},
                    {"7": {"logprob": -0.5, "rank": 1}, "8": {"logprob": -1.0}},
                    {"9": {"logprob": -2.25}},
                ]
            }
        ]
    }
    assert rescored_sum(reply, 2, [7, 9]) == -2.75
    with pytest.raises(ValueError, match="4 entries, expected 5"):
        rescored_sum(reply, 3, [7, 9])
    with pytest.raises(ValueError, match="no logprob for token 6 at generated position 0"):
        rescored_sum(reply, 2, [6, 9])
    with pytest.raises(ValueError, match="prompt_logprobs"):
        rescored_sum({"choices": [{"text": "x"}]}, 2, [7, 9])
    assert rescore_body("m", [1, 2], [7, 9]) == {
        "model": "m",
        "prompt": [1, 2, 7, 9],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 0,
        "stream": False,
    }


def test_the_instrument_is_the_reference_arm():
    ngram = dict(NGRAM["vllm"])
    classic = [ArmSpec("baseline", "vllm"), ArmSpec("speculative", "vllm", ngram)]
    assert [instrument_arm(a.name, classic) for a in classic] == ["baseline", "baseline"]
    aa = [ArmSpec("baseline", "vllm"), ArmSpec("speculative", "vllm")]  # A/A: still the baseline
    assert [instrument_arm(a.name, aa) for a in aa] == ["baseline", "baseline"]
    named = [
        ArmSpec("v-none", "vllm"),
        ArmSpec("v-ngram", "vllm", ngram),
        ArmSpec("l-none", "llama.cpp"),
        ArmSpec("l-ngram", "llama.cpp", {"type": "ngram-mod"}),
    ]
    assert [instrument_arm(a.name, named) for a in named] == ["v-none", "v-none", "l-none", "l-none"]


def _one(fake, prompt_ids, token_ids):
    async def go():
        async with serving(fake.server(), "aiohttp") as (s, base):
            return await rescore_one(s, base, "m", prompt_ids, token_ids, "rid.rescore")

    return asyncio.run(go())


def test_rescore_one_sends_prompt_and_sample_and_sums_the_reference_logprobs():
    fake = FakeSampler()
    value, reason = _one(fake, [101, 102, 103], [10, 12, 2])
    lp = raw_logprobs()
    assert reason is None and value == pytest.approx(lp[10] + lp[12] + lp[2])
    assert fake.rescore_bodies[0]["prompt"] == [101, 102, 103, 10, 12, 2]
    assert fake.rescore_bodies[0]["prompt_logprobs"] == 0 and fake.rescore_bodies[0]["max_tokens"] == 1


def test_a_sample_that_cannot_be_rescored_says_why():
    assert _one(FakeSampler(), None, [10]) == (
        None,
        "the sample's server did not return the prompt's token ids (vLLM's return_token_ids)",
    )
    value, reason = _one(FakeVllm(), [1, 2], [10])  # a server without /v1/completions
    assert value is None and reason.startswith("re-scoring failed: HTTP 404")


# ------------------------------------------------------------------ the whole check
def check(base: FakeSampler, spec: FakeSampler) -> dict[str, dict]:
    """Both arms' sampling passes, every sample re-scored on the baseline server; the mart's rows."""

    async def go() -> pa.Table:
        tables = []
        async with (
            serving(base.server(), "aiohttp") as (session, base_url),
            serving(spec.server(), "aiohttp") as (spec_session, spec_url),
        ):
            for arm, s, url in (("baseline", session, base_url), ("speculative", spec_session, spec_url)):
                results = await sample_pass(
                    s, url, "m", ROWS, 4, lambda i, arm=arm: f"sd.t.{arm}.c4.{i:05d}.sample", None, SEEDS, EOS
                )
                await rescore_pass(session, base_url, "m", results, 4, by="baseline")
                tables.append(sample_table("t", arm, 4, results))
        return pa.concat_tables(tables)

    table = asyncio.run(go())
    for r in table.to_pylist():
        SampleCheck.model_validate(r)
    return by_stat(mart(table))


def test_the_samples_carry_token_ids_and_the_reference_score():
    base, spec = FakeSampler(), FakeSampler(report_offset=-1.0)

    async def go():
        async with serving(base.server(), "aiohttp") as (s, url), serving(spec.server(), "aiohttp") as (s2, url2):
            results = await sample_pass(s2, url2, "m", ROWS[:1], 1, str, None, [5, 6], EOS)
            await rescore_pass(s, url, "m", results, 1, by="baseline")
            return results

    results = asyncio.run(go())
    rows = sample_table("t", "speculative", 1, results).to_pylist()
    lp = raw_logprobs()
    for (_, res), row in zip(results, rows):
        assert row["token_ids"] == res.token_ids and len(row["token_ids"]) == 16
        assert res.prompt_token_ids == prompt_token_ids(ROWS[0].prompt)
        assert row["rescored_logprob_sum"] == pytest.approx(sum(lp[t] for t in row["token_ids"]))
        assert row["sequence_logprob"] == pytest.approx(row["rescored_logprob_sum"] - 16)  # its report is off
        assert row["rescored_by"] == "baseline" and row["not_rescored_reason"] is None
    assert rows[0]["token_ids"] != rows[1]["token_ids"]  # two seeds, two samples
    assert all(b["return_token_ids"] is True for b in spec.bodies)
    assert [b["prompt"][-16:] for b in base.rescore_bodies] == [r["token_ids"] for r in rows]


def test_equal_distributions_pass():
    rows = check(FakeSampler(), FakeSampler())
    for name in ("rescored_logprob", "natural_length"):
        assert rows[name]["verdict"] == st.SAME, rows[name]
    r = rows["rescored_logprob"]
    assert (r["n_baseline"], r["prompts"], r["distinct_share_speculative"]) == (64, 4, 1.0)
    assert r["reported_minus_rescored_speculative"] == pytest.approx(0.0, abs=1e-9)


def test_a_shifted_distribution_fails():
    rows = check(FakeSampler(), FakeSampler(temperature_factor=1.6))  # flatter: less likely tokens
    r = rows["rescored_logprob"]
    assert r["verdict"] == st.DIFFERS and r["p_value"] < 0.025 and r["mean_difference"] < 0


def test_a_seed_ignoring_arm_is_flagged_samples_not_distinct():
    rows = check(FakeSampler(), FakeSampler(ignore_seed=True))
    for name in ("rescored_logprob", "natural_length"):
        assert rows[name]["verdict"] == st.NOT_DISTINCT
    r = rows["rescored_logprob"]
    assert r["distinct_share_speculative"] == 1 / 16 and r["not_distinct_prompts_speculative"] == 4
    assert r["distinct_share_baseline"] == 1.0 and r["not_distinct_prompts_baseline"] == 0


def test_a_reporting_artefact_is_not_a_sampling_defect():
    rows = check(FakeSampler(), FakeSampler(report_offset=-2.0))  # 32 nats too low per sample, sampling fine
    assert rows["rescored_logprob"]["verdict"] == st.SAME
    diag = rows["sequence_logprob"]
    assert diag["verdict"] is None and diag["excluded_reason"] == st.DIAGNOSTIC and diag["p_value"] < 0.025
    assert diag["reported_minus_rescored_speculative"] == pytest.approx(-32.0)


def test_a_server_without_prompt_ids_leaves_the_reported_test_and_says_why():
    rows = check(FakeSampler(), FakeSampler(prompt_ids=False))
    r = rows["rescored_logprob"]
    assert r["verdict"] is None and "did not return the prompt's token ids" in r["excluded_reason"]
    assert r["not_rescored_speculative"] == 64 and r["not_rescored_baseline"] == 0
