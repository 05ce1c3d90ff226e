"""The probe set on the session's shared vLLM pair (tests/conftest.py's
``vllm_pair``: float32, baseline and ngram k=4): every cell gets an outcome and
its evidence. No fresh servers: the probes change no server flag, and each
cell's acceptance is the counters' difference around its own requests; the
pair's capture plugin rows are reconciled with the counters, cell by cell.

The smallest design that exercises every code path of the probing against the
real engine (issue 40): one repeat, and one probe per distinct path rather than
the whole matrix (``ENGINE_PROBES``): a grammar (json_schema); a tool call
(the embedded vLLM runs without a tool-call parser, so both arms refuse every
tool probe there: the not-offered path); a stream; logprobs; a seeded probe
sent twice within its repeat (two pairs: the interval's path); logit_bias (the
/tokenize context); a penalty whose plain twin is the stream's (a twin's sends
reused); both multi-turn sessions (the prefix cache by turn, on and off); the
long input (max_model_len from /v1/models); and the sampling cell at one level of 4 with 3
seeds (both arms sampling at once, re-scored on the baseline, the permutation test); the lossless cell at
one level (token ids and top-2 logprobs from the chat stream). Every probe's outcome and check is
unit-tested on recorded replies (tests/experiments/compat/test_probing.py,
test_classify.py and beside them); the full matrix at its default repeats is a
command (``specdec compat``), not a test. The statistical properties of the
paired speedup are not asserted here: only that it is computed from the pairs
that were sent."""

from __future__ import annotations

import asyncio
import os

import pytest

from specdec.analytics.sampling_check import DIFFERS, compare
from specdec.engines.vllm import installed_facts
from specdec.experiments.compat import lossless_cells, sampling_cells
from specdec.experiments.compat.capture_check import read_capture, reconcile
from specdec.experiments.compat.probes import ProbeContext, probe_set
from specdec.experiments.compat.probing import Pair, probe_pair
from specdec.experiments.compat.run import matrix_text
from specdec.http.urls import ClientSettings, parse_endpoint
from specdec.schemas.compat import OUTCOMES

pytestmark = pytest.mark.engine

#: One probe per distinct path (module docstring); the rest differ only in their body and check.
ENGINE_PROBES = frozenset(
    {
        "json_schema",
        "tool_choice_auto",
        "stream",
        "top_logprobs",
        "seed",
        "logit_bias",
        "repetition_penalty",
        "session_prefix_cache_on",
        "session_prefix_cache_off",
        "near_max_length",
    }
)
REPEATS = 1
#: The sampling cell's path (both arms sampling at once, the re-scoring on the baseline, the test, the
#: capture check that must not count a re-scoring as its sample): one level of at least 4, 3 seeds.
SAMPLING_LEVEL, SAMPLING_SEEDS = 4, 3


@pytest.fixture(scope="module")
def cells(vllm_pair):
    pair = Pair(
        "vllm",
        installed_facts().get("version"),
        "ngram",
        parse_endpoint(vllm_pair.baseline.base_url),
        parse_endpoint(vllm_pair.speculative.base_url),
    )
    settings = ClientSettings(connect_timeout_s=10, request_timeout_s=120)
    found, sent = asyncio.run(
        probe_pair(
            pair,
            settings,
            "compat-engine",
            echo=print,
            only=ENGINE_PROBES | {sampling_cells.NAME, lossless_cells.NAME},
            repeats=REPEATS,
            sampling=sampling_cells.Test(compare, DIFFERS),
            sampling_levels=(SAMPLING_LEVEL,),
            sampling_seeds=SAMPLING_SEEDS,
            lossless_levels=(1,),
        )
    )
    found = reconcile(found, sent, read_capture(vllm_pair.capture_dir, "compat-engine", wait_s=15.0))
    text = matrix_text(found)
    print(text)
    if os.environ.get("SPECDEC_COMPAT_MATRIX"):  # where a developer wants the matrix kept
        with open(os.environ["SPECDEC_COMPAT_MATRIX"], "w") as f:
            f.write(text + "\n" + "\n".join(c.model_dump_json() for c in found) + "\n")
    return found, sent


def test_every_probe_gets_a_cell_with_an_outcome(cells):
    found, sent = cells
    # the server reports max_model_len and has /tokenize: the long-input and logit_bias probes are built
    every = {p.name for p in probe_set(ProbeContext(2048, "x", 1))}
    assert ENGINE_PROBES <= every  # every name chosen is a probe of the set
    assert {e["probe"] for e in sent} == ENGINE_PROBES | {sampling_cells.NAME, lossless_cells.NAME}
    sessions = {p.name for p in probe_set(ProbeContext(2048, "x", 1)) if p.session} & ENGINE_PROBES
    turns = {f"{name}.turn{t}" for name in sessions for t in (1, 2, 3)}
    sampled = {sampling_cells.probe_name(SAMPLING_LEVEL), lossless_cells.probe_name(1)}
    assert {c.probe for c in found} == (ENGINE_PROBES - sessions) | turns | sampled
    assert all(c.outcome in OUTCOMES and c.detail for c in found)


def test_every_cell_has_its_evidence(cells):
    for c in cells[0]:
        assert c.baseline_http_status is not None or c.baseline_error, c.probe  # a reply, or why none
        if c.outcome == "refused":
            assert c.baseline_accepted and not c.speculative_accepted and c.speculative_error
        elif c.outcome in ("works", "degrades", "broken", "not tested"):
            assert c.baseline_accepted and c.speculative_accepted, c.probe
            if c.sampling_level is None and c.feature != "lossless":  # many outputs: the cell's figures say
                assert c.baseline_output_sha256 and c.speculative_output_sha256
            # the engine's counters were read around the cell's own requests
            assert c.draft_tokens is not None and c.accepted_tokens is not None, c.probe
            assert 0 <= c.accepted_tokens <= c.draft_tokens
            if c.identity_expected:
                assert c.identical is not None
        if c.outcome == "works" and c.identity_expected:
            assert c.identical is True
        if c.outcome == "works":  # issue 43: the speculative arm drafted in a works cell
            assert c.draft_tokens, (c.probe, c.detail)
        if c.outcome == "not tested" and c.sampling_level is None and c.feature != "lossless":  # no draft, nor twin
            assert c.draft_tokens == 0 and not c.plain_draft_tokens, (c.probe, c.detail)


def test_the_lossless_cell_reads_token_ids_and_top2_on_the_engine(cells):
    """The chat stream's logprobs path on the real engine (issue 43, item 3): the copy prompts draft, the
    pairs are classified, and on the float32 pair nothing is suspect."""
    (c,) = [c for c in cells[0] if c.feature == "lossless"]
    n = len(lossless_cells.PROMPTS)
    assert c.outcome == "works" and c.draft_tokens and c.accepted_tokens, c.detail
    assert c.lossless_identical + c.lossless_near_ties == n and c.lossless_suspect == 0, c.detail


def test_speculation_ran_on_the_plain_code_prompt(cells):
    """The plain twin of the code prompt drafts under ngram: the acceptance columns measure something."""
    stream = next(c for c in cells[0] if c.probe == "stream")
    assert stream.plain_draft_tokens and stream.plain_draft_tokens > 0


def test_every_timed_cell_has_a_paired_speedup_from_its_own_pairs(cells):
    found, sent = cells
    twin_sent_by = {e["probe"]: e["twin_sent_by"] for e in sent}
    for c in found:
        timed = ("works", "degrades", "broken", "not tested")
        if c.sampling_level is not None or c.feature == "lossless":  # not timed pairs: no speed
            assert c.speedup is None and c.speed_label is None, c.probe
        elif c.outcome in timed and c.baseline_accepted and c.speculative_accepted:
            # one pair per feature request sent: 1 per repeat, the seeded probe's 2 (sent twice in its repeat)
            per_repeat = 2 if c.probe == "seed" else 1
            assert c.repeats == REPEATS and c.speedup_pairs == REPEATS * per_repeat, c.probe
            assert c.speedup is not None and c.speedup > 0, c.probe
            if c.speedup_pairs >= 2:  # an interval needs two pairs
                assert c.speedup_ci_low is not None and c.speedup_ci_low <= c.speedup <= c.speedup_ci_high, c.probe
            else:
                assert c.speedup_ci_low is None and c.speedup_ci_high is None, c.probe
            if c.turn is None:
                assert c.plain_speedup is not None and c.speedup_vs_plain is not None, c.probe
    seed = next(c for c in found if c.probe == "seed")
    assert seed.speedup_pairs == 2 and seed.speedup_ci_low is not None, seed.detail
    # the penalty's plain twin is the stream's body: sent once, its replies reused
    assert twin_sent_by["repetition_penalty"] == "stream" and twin_sent_by["stream"] is None


def test_the_session_by_turn_with_prefix_caching_on_and_off(cells):
    by = {(c.prefix_caching, c.turn): c for c in cells[0] if c.turn is not None}
    assert set(by) == {(m, t) for m in ("on", "off") for t in (1, 2, 3)}
    # vLLM's prefix cache: with one salt per session the later turns reuse the earlier turns' blocks;
    # with a salt per turn nothing is reused (a block is 16 tokens: a short turn may hit nothing)
    assert all(by[("off", t)].prefix_cache_hit_rate == 0.0 for t in (1, 2, 3))
    assert by[("on", 3)].prefix_cache_hit_rate and by[("on", 3)].prefix_cache_hit_rate > 0


def test_the_capture_reconciles_with_the_counters_in_both_arms(cells):
    for c in cells[0]:
        assert c.capture_detail, c.probe
        assert (c.baseline_capture_reconciles, c.speculative_capture_reconciles) == (True, True), (
            c.probe,
            c.capture_detail,
        )


def test_the_sampling_cell_is_judged_on_re_scored_samples_of_both_arms(cells):
    """Decided either way (the CPU engine's ngram arm has sampled off-distribution at T > 0: the
    replay's sampling check, BENCHMARKS.md; here, 2026-12-06, 'broken' at p = 0.014 with the
    speculative samples 53 nats less likely under the target), but decided: every sample of both arms re-scored on
    the baseline and tested, the speculative arm drafting while it sampled; a re-scoring is not
    its sample's request (the baseline's capture reconciles: the cell is not 'broken' by it)."""
    c = next(c for c in cells[0] if c.probe == sampling_cells.probe_name(SAMPLING_LEVEL))
    assert c.outcome in ("works", "broken"), c.detail
    assert c.sampling_pairs == len(sampling_cells.PROMPTS) * SAMPLING_SEEDS and c.sampling_p_value is not None
    assert c.draft_tokens and c.draft_tokens > 0, c.detail
    if c.outcome == "broken":
        assert "off the target's distribution" in c.detail, c.detail
