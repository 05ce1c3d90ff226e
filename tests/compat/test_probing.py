"""The probe set against fake servers (tests/support/compat_server.py): an honest
pair works everywhere; a speculative arm that breaks the schema, refuses tools or
stops drafting is caught, cell by cell."""

from __future__ import annotations

import asyncio
import json

from specdec.engines.urls import ClientSettings, parse_endpoint
from specdec.replay.compat.probes import ProbeContext, probe_set
from specdec.replay.compat.probing import Pair, probe_pair
from tests.support.compat_server import TOOLS_ERROR, CompatFake, fake_pair

SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)


def run_pair(baseline: CompatFake, speculative: CompatFake, only=None):
    async def go():
        async with fake_pair(baseline, speculative) as (b, s):
            pair = Pair("fake", "0", "ngram", parse_endpoint(b), parse_endpoint(s), settle_s=0.0)
            return await probe_pair(pair, SETTINGS, "t1", echo=lambda _: None, only=only)

    cells, sent = asyncio.run(go())
    return {c.probe: c for c in cells}, sent


def test_an_honest_pair_works_in_every_cell():
    cells, sent = run_pair(CompatFake(False), CompatFake(True))
    names = [p.name for p in probe_set(ProbeContext(512, "x", 42))]
    assert sorted(cells) == sorted(names)  # the fake offers /tokenize and max_model_len: every probe was built
    assert {c.outcome for c in cells.values()} == {"works"}, {c.probe: c.detail for c in cells.values()}
    js = cells["json_schema"]
    assert js.baseline_valid is True and js.speculative_valid is True and js.identical is True
    # the counters' differences around the cell's own requests: one feature request of 8 draft tokens
    assert (js.draft_tokens, js.accepted_tokens, js.drafts) == (8, 6, 2)
    assert (js.plain_draft_tokens, js.plain_accepted_tokens) == (8, 6)
    assert cells["seed"].draft_tokens == 16 and cells["seed"].identical is None  # sent twice; sampled
    assert cells["session_prefix_cache"].draft_tokens == 24  # three turns
    assert cells["min_tokens"].speculative_valid is True
    assert cells["stop"].speculative_valid is True  # the twin wrote ' for ' (exercised), the probe did not
    assert {e["probe"] for e in sent} == set(names)
    assert all(e["bodies"] for e in sent)


def test_schema_invalid_json_only_with_speculation_is_broken():
    cells, _ = run_pair(CompatFake(False), CompatFake(True, invalid_json=True))
    js = cells["json_schema"]
    assert js.outcome == "broken"
    assert js.baseline_valid is True and js.speculative_valid is False
    assert "at is_capital: 'yes' is not of type 'boolean'" in js.speculative_validity_detail
    assert js.identical is False
    assert cells["json_object"].outcome == "works"  # only the schema probe is affected


def test_tools_refused_under_speculation_is_refused_with_its_error():
    cells, _ = run_pair(CompatFake(False), CompatFake(True, refuse_tools=True))
    for name in ("tool_choice_auto", "tool_choice_required", "tool_choice_named"):
        c = cells[name]
        assert c.outcome == "refused", (name, c.detail)
        assert c.baseline_accepted and not c.speculative_accepted
        assert c.speculative_http_status == 400
        assert json.loads(c.speculative_error)["error"]["message"] == TOOLS_ERROR  # the body, verbatim
        assert "HTTP 400" in c.detail and "(request rejected)" in c.detail and "\n" not in c.detail  # escaped
    assert cells["json_schema"].outcome == "works"


def test_refused_by_both_arms_is_not_offered():
    cells, _ = run_pair(CompatFake(False, refuse_key="n"), CompatFake(True, refuse_key="n"), only={"n2", "stream"})
    assert cells["n2"].outcome == "not offered"
    assert "'n' is not supported" in cells["n2"].detail and "HTTP 400" in cells["n2"].detail
    assert cells["stream"].outcome == "works"


def test_no_drafts_with_the_feature_degrades():
    cells, _ = run_pair(CompatFake(False), CompatFake(True, no_drafts_with="logprobs"), only={"top_logprobs", "stream"})
    lp = cells["top_logprobs"]
    assert lp.outcome == "degrades", lp.detail
    assert lp.draft_tokens == 0 and lp.plain_draft_tokens == 8
    assert cells["stream"].outcome == "works"
