"""The sampling-distribution cells of the matrix (issue 43, item 2) against fake samplers
(tests/support/fake_sampler.py: a model that really samples, seeded, and answers the re-scoring):
an honest speculative arm that drafts works at every level; one that samples at another
temperature only with several requests in flight (the field report: corrupted above 2 concurrent
sequences at T > 0) is broken at that level and works at level 1; a speculative arm that drafts
nothing, or a baseline that reports no prompt token ids, is not tested; a speculative server that
fails every sample refused it. The verdict is the sampling pass's own test, handed in as the CLI
does."""

from __future__ import annotations

import asyncio

from aiohttp import web

from specdec.analytics.sampling_check import DIFFERS, compare
from specdec.experiments.compat import sampling_cells
from specdec.experiments.compat.capture_check import REQUEST_ID
from specdec.experiments.compat.probing import Pair, probe_pair
from specdec.experiments.compat.run import CompatConfig
from specdec.http.urls import ClientSettings, parse_endpoint
from tests.support.fake_sampler import FakeSampler

SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
TEST = sampling_cells.Test(compare, DIFFERS)


class Speculative(FakeSampler):
    """A sampler whose speculation counters move by ``draft`` tokens per request; with
    ``corrupt_above``, it samples at ``temperature_factor`` only while more than that many requests
    are in flight (the defect a level-1 check cannot see)."""

    def __init__(self, draft: int = 4, corrupt_above: int | None = None, fail: bool = False, accept=True, **kw):
        factor = kw.pop("temperature_factor", 1.0)
        super().__init__(**kw)
        self.draft, self.corrupt_above, self.fail, self.factor = draft, corrupt_above, fail, factor
        self.accept = accept
        self.requests = self.in_flight = self.most_in_flight = 0

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if self.fail:
            return web.json_response({"error": {"message": "speculation does not sample"}}, status=400)
        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)  # let the closed loop fill its level
            crowded = self.corrupt_above is not None and self.in_flight > self.corrupt_above
            self.temperature_factor = self.factor if (self.corrupt_above is None or crowded) else 1.0
            return await super().chat(request)
        finally:
            self.in_flight -= 1

    async def metrics(self, request: web.Request) -> web.Response:
        n, d = self.requests, self.draft
        return web.Response(
            text=(
                f"vllm:spec_decode_num_drafts_total {n * (d > 0)}\n"
                f"vllm:spec_decode_num_draft_tokens_total {n * d}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {n * d // 2 if self.accept else 0}\n"
                f"vllm:generation_tokens_total {n * 24}\n"
            )
        )


def cells_of(baseline: FakeSampler, speculative: FakeSampler, levels=(1, 4), test=TEST) -> dict:
    async def go():
        b, s = baseline.server(), speculative.server()
        await b.start_server()
        await s.start_server()
        try:
            urls = (parse_endpoint(str(x.make_url(""))) for x in (b, s))
            pair = Pair("fake", "0", "ngram", *urls, settle_s=0.0)
            return await probe_pair(
                pair,
                SETTINGS,
                "t1",
                echo=lambda _: None,
                only=frozenset({sampling_cells.NAME}),
                sampling=test,
                sampling_levels=levels,
            )
        finally:
            await b.close()
            await s.close()

    cells, sent = asyncio.run(go())
    return {c.probe: c for c in cells}, sent


def test_an_honest_drafting_arm_works_at_every_level_with_its_figures():
    spec = Speculative()
    cells, sent = cells_of(FakeSampler(), spec)
    assert set(cells) == {"sampling_distribution.c1", "sampling_distribution.c4"}
    for level in (1, 4):
        c = cells[f"sampling_distribution.c{level}"]
        assert c.outcome == "works", c.detail
        assert c.feature == "sampling" and c.sampling_level == level and c.identity_expected is False
        n = len(sampling_cells.PROMPTS) * sampling_cells.SEEDS
        assert c.sampling_pairs == n and c.requests_sent == 2 * n
        assert c.sampling_p_value is not None and c.sampling_p_value >= 0.025
        assert c.sampling_min_detectable_shift and c.sampling_min_detectable_shift > 0
        assert c.draft_tokens == 4 * n  # the speculative arm's counters around its own samples
    assert spec.most_in_flight == 4  # the level is what was in flight
    (entry,) = sent
    assert entry["probe"] == "sampling_distribution" and entry["design"]["levels"] == [1, 4]
    ids = entry["cells"]["sampling_distribution.c4"]["speculative"]["request_ids"]
    assert len(ids) == 24 and all(i.startswith("compat.t1.fake.sampling_distribution.c4.speculative.") for i in ids)


def test_a_sampler_corrupted_only_with_several_in_flight_is_broken_at_that_level_alone():
    cells, _ = cells_of(FakeSampler(), Speculative(corrupt_above=2, temperature_factor=0.6))
    assert cells["sampling_distribution.c1"].outcome == "works", cells["sampling_distribution.c1"].detail
    c4 = cells["sampling_distribution.c4"]
    assert c4.outcome == "broken" and "off the target's distribution" in c4.detail, c4.detail
    assert c4.sampling_p_value < 0.025 and c4.sampling_mean_difference > 0  # colder: likelier tokens


def test_no_draft_is_not_tested_even_when_the_distributions_agree():
    cells, _ = cells_of(FakeSampler(), Speculative(draft=0), levels=(4,))
    c = cells["sampling_distribution.c4"]
    assert c.outcome == "not tested" and "nothing was drafted" in c.detail, c.detail


def test_drafts_that_are_never_accepted_leave_the_acceptance_path_not_tested():
    cells, _ = cells_of(FakeSampler(), Speculative(accept=False), levels=(1,))
    c = cells["sampling_distribution.c1"]
    assert c.outcome == "not tested" and "none of the 96 drafted tokens was accepted" in c.detail, c.detail


def test_a_baseline_without_prompt_token_ids_sends_no_later_level_and_says_why():
    spec = Speculative()
    cells, _ = cells_of(FakeSampler(prompt_ids=False), spec)
    for c in cells.values():
        assert c.outcome == "not tested" and "no prompt token ids" in c.detail, c.detail
    # found on the first level's pass (both arms sample at once): no later level is sent
    assert spec.requests == len(sampling_cells.PROMPTS) * sampling_cells.SEEDS


def test_a_speculative_server_that_fails_every_sample_refused_it():
    cells, _ = cells_of(FakeSampler(), Speculative(fail=True), levels=(1,))
    c = cells["sampling_distribution.c1"]
    assert c.outcome == "refused" and "speculation does not sample" in c.detail, c.detail


def test_without_a_test_the_cells_are_not_judged():
    cells, _ = cells_of(FakeSampler(), Speculative(), levels=(1,), test=None)
    c = cells["sampling_distribution.c1"]
    assert c.outcome == "not tested" and "not judged" in c.detail and c.sampling_pairs == 24


def test_the_levels_to_sample_follow_the_probe_names_and_the_config():
    assert sampling_cells.wanted(None, (1, 4)) == (1, 4)
    assert sampling_cells.wanted(frozenset({"json_schema"}), (1, 4)) == ()
    assert sampling_cells.wanted(frozenset({"sampling_distribution.c4"}), (1, 4)) == (4,)
    assert CompatConfig().sampling_levels == [1, 4]
    for bad in ([0], [4, 4]):
        try:
            CompatConfig(sampling_levels=bad)
        except ValueError as exc:
            assert "sampling levels" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_samples_rescoring_is_not_counted_as_the_samples_own_request():
    """vLLM names a request 'chatcmpl-<id>-<hex>' (or 'cmpl-'): the re-scoring of sample <id> is
    '<id>.rescore', a request of its own on the baseline (its token would break the reconciliation)."""
    rid = "compat.t1.vllm.sampling_distribution.c4.baseline.7"
    assert REQUEST_ID.search(f"chatcmpl-{rid}-0a1b2c3d").group(1) == rid
    assert REQUEST_ID.search(f"cmpl-{rid}.rescore-0a1b2c3d") is None
    assert REQUEST_ID.search(f"chatcmpl-{rid}7-0a1b2c3d").group(1) == rid + "7"


def test_a_baseline_that_fails_every_sample_is_not_asked_again_at_the_next_level():
    class NoLogprobs(FakeSampler):
        async def chat(self, request: web.Request) -> web.StreamResponse:
            self.bodies.append(await request.json())
            return web.json_response({"error": {"message": "logprobs are not supported"}}, status=400)

    base = NoLogprobs()
    cells, _ = cells_of(base, Speculative())
    c1, c4 = cells["sampling_distribution.c1"], cells["sampling_distribution.c4"]
    assert c1.outcome == "not offered" and "logprobs are not supported" in c1.detail, c1.detail
    assert c4.outcome == "not offered" and "failed every seeded sample with logprobs at level 1" in c4.detail, c4.detail
    assert len(base.bodies) == len(sampling_cells.PROMPTS) * sampling_cells.SEEDS  # level 1's only
