"""The probe set on the session's shared vLLM pair (tests/conftest.py's
``vllm_pair``: float32, baseline and ngram k=4): every cell gets an outcome and
its evidence. No fresh servers: the probes change no server flag, and each
cell's acceptance is the counters' difference around its own requests. Two
repeats (the fewest that give a speedup interval), and the pair's capture
plugin rows reconciled with the counters, cell by cell."""

from __future__ import annotations

import asyncio
import os

import pytest

from specdec.engines.urls import ClientSettings, parse_endpoint
from specdec.replay.compat.capture_check import read_capture, reconcile
from specdec.replay.compat.probes import ProbeContext, probe_set
from specdec.replay.compat.probing import Pair, probe_pair
from specdec.replay.compat.run import matrix_text
from specdec.replay.host import engine_facts
from specdec.schemas.compat import OUTCOMES

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def cells(vllm_pair):
    pair = Pair(
        "vllm",
        engine_facts().get("version"),
        "ngram",
        parse_endpoint(vllm_pair.baseline.base_url),
        parse_endpoint(vllm_pair.speculative.base_url),
    )
    settings = ClientSettings(connect_timeout_s=10, request_timeout_s=120)
    found, sent = asyncio.run(probe_pair(pair, settings, "compat-engine", echo=print, repeats=2))
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
    assert every == {e["probe"] for e in sent}
    sessions = {p.name for p in probe_set(ProbeContext(2048, "x", 1)) if p.session}
    turns = {f"{name}.turn{t}" for name in sessions for t in (1, 2, 3)}
    assert {c.probe for c in found} == (every - sessions) | turns
    assert all(c.outcome in OUTCOMES and c.detail for c in found)


def test_every_cell_has_its_evidence(cells):
    for c in cells[0]:
        assert c.baseline_http_status is not None or c.baseline_error, c.probe  # a reply, or why none
        if c.outcome == "refused":
            assert c.baseline_accepted and not c.speculative_accepted and c.speculative_error
        elif c.outcome in ("works", "degrades", "broken"):
            assert c.baseline_accepted and c.speculative_accepted, c.probe
            assert c.baseline_output_sha256 and c.speculative_output_sha256
            # the engine's counters were read around the cell's own requests
            assert c.draft_tokens is not None and c.accepted_tokens is not None, c.probe
            assert 0 <= c.accepted_tokens <= c.draft_tokens
            if c.identity_expected:
                assert c.identical is not None
        if c.outcome == "works" and c.identity_expected:
            assert c.identical is True


def test_speculation_ran_on_the_plain_code_prompt(cells):
    """The plain twin of the code prompt drafts under ngram: the acceptance columns measure something."""
    stream = next(c for c in cells[0] if c.probe == "stream")
    assert stream.plain_draft_tokens and stream.plain_draft_tokens > 0


def test_every_timed_cell_has_a_paired_speedup_with_an_interval(cells):
    for c in cells[0]:
        if c.outcome in ("works", "degrades", "broken") and c.baseline_accepted and c.speculative_accepted:
            assert c.repeats == 2 and c.speedup_pairs and c.speedup_pairs >= 2, c.probe
            assert c.speedup_ci_low is not None and c.speedup_ci_low <= c.speedup <= c.speedup_ci_high, c.probe
            if c.turn is None:
                assert c.plain_speedup is not None and c.speedup_vs_plain is not None, c.probe


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
