"""plan.html tells one story (issue 42, item 2): it leads with what to deploy (the pools and k per
band, the predicted traffic-weighted gain with its interval, validated or not, the routing, the
vLLM schedule, the llama.cpp flags), then the per-cell table that explains it; and what it says
to deploy agrees, (category, band) by (category, band), with that table and with plan.json."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest

from specdec.analytics.plan.page import render
from specdec.analytics.plan.run import PlanConfig, make_plan, write_plan
from tests.support import plan_run
from tests.support.plan_run import SWEEP, write_plan_run
from tests.support.synthetic_run import write_run


class _Tables(HTMLParser):
    """Every table with an id: id -> rows of cell texts (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._id = dict(attrs).get("id")
            if self._id:
                self.tables[self._id] = []
        elif self._id and tag == "tr":
            self.tables[self._id].append([])
        elif self._id and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._id = None
        elif self._id and tag in ("td", "th") and self._cell is not None:
            self.tables[self._id][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _tables(html: str) -> dict[str, list[list[str]]]:
    p = _Tables()
    p.feed(html)
    return p.tables


def _k(text: str) -> int:
    return 0 if text == "off" else int(text)


def _repeats_apart(arm, prompt, level, repeat):
    """The speculative arms 5% slower in repeat 1: a measurement noise above 0."""
    return 1000.0 if arm in ("baseline", "k0") else 1000.0 * (1 + 0.05 * repeat)


def _one_code_prompt(run_dir):
    """The classic run with code-1 left out: code's evidence is thin, so code is off (plain pool) and
    chat speculates (tests/plan/test_thin_evidence.py): a plan with both pools."""
    arms = plan_run.CLASSIC
    return write_run(
        run_dir,
        plan_run.make_counters(arms),
        requests=[r for r in plan_run.make_requests(arms, _repeats_apart) if r.prompt_id != "code-1"],
        rounds=[r for r in plan_run.make_rounds(arms) if ".00001-" not in r.engine_request_id],
        manifest=plan_run._manifest(arms),
    )


@pytest.fixture(scope="module", params=["classic", "sweep", "both pools"])
def written(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("page")
    if request.param == "both pools":
        run = _one_code_prompt(root)
    else:
        run = write_plan_run(
            root, e2e=_repeats_apart, arms={"classic": plan_run.CLASSIC, "sweep": SWEEP}[request.param]
        )
    plan = make_plan(run, PlanConfig(replicates=40))
    write_plan(plan, root / "plan")
    return json.loads((root / "plan" / "plan.json").read_text()), (root / "plan" / "plan.html").read_text()


def test_the_page_leads_with_what_to_deploy_then_the_table_that_explains_it(written):
    plan, html = written
    marks = [
        'id="what-to-deploy"',
        'id="deploy-gain"',
        "Not validated by replay",
        'id="deploy-settings"',
        'id="vllm-schedule"',
        'id="vllm-settings"',
        'id="llama-cpp-settings"',
        'id="why"',
        'id="cells"',
        'id="rule"',
    ]
    at = [html.index(m) for m in marks]
    assert at == sorted(at), dict(zip(marks, at))
    body = html[html.index("<h1") :]  # the page shell's scripts come before it
    assert re.findall(r"<h2[^>]*>([^<]*)</h2>", body)[:3] == [
        "What to deploy",
        "Why: per category and load band",
        "The decision rule",
    ]
    deployed = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")["overall"]
    gain = html[html.index('id="deploy-gain"') : html.index('id="deploy-settings"')]
    assert f"{deployed['gain']:.3f} [{deployed['low']:.3f}, {deployed['high']:.3f}]" in gain
    assert f"{int(plan['confidence'] * 100)}% bootstrap interval" in gain


def test_what_to_deploy_and_the_per_cell_table_agree(written):
    plan, html = written
    tables = _tables(html)
    head, *settings = tables["deploy-settings"]
    bands = [int(h.removeprefix("k at band c")) for h in head[2:]]
    assert bands == plan["levels"]
    deploy = {(row[0], level): _k(k) for row in settings for level, k in zip(bands, row[2:])}
    pools = {row[0]: row[1] for row in settings}
    head, *cells = tables["cells"]
    assert head[:3] == ["category", "band", "deployed k"]
    table = {(row[0], int(row[1].removeprefix("c"))): _k(row[2]) for row in cells}
    assert deploy == table and len(deploy) == len(plan["cells"])
    # and both are plan.json's: the deployed policy's k per band, each cell's deployed_k, the routing
    policy = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")
    assert deploy == {(cat, b["level"]): k for b in policy["bands"] for cat, k in b["k"].items()}
    assert table == {(c["category"], c["level"]): c["deployed_k"] for c in plan["cells"]}
    assert pools == plan["exports"]["routing"]["pools"]
    assert all(pools[cat] == "speculative" for (cat, _), k in deploy.items() if k > 0)
    assert all(any(deploy[(cat, lv)] > 0 for lv in bands) for cat in pools if pools[cat] == "speculative")
    # the vLLM schedule serves each band's speculative categories at their k
    _, *schedule = tables["vllm-schedule"]
    assert len(schedule) == len(bands)
    for (_, k), level in zip(schedule, bands):
        assert _k(k) == max((deploy[(cat, level)] for cat in pools if pools[cat] == "speculative"), default=0)
    for engine, export in plan["exports"]["engines"].items():
        at = html.index(f'id="{engine.replace(".", "-")}-settings"')
        shown = html[at : html.index("</pre>", at)]
        assert (export["command"] or "speculation off") in shown.replace("&quot;", '"')


def test_the_both_pools_plan_has_both_pools(written, request):
    """The agreement above is not 'k = 4 everywhere' only: one plan has code off and chat speculating."""
    if request.node.callspec.params["written"] != "both pools":
        pytest.skip("the plan with both pools only")
    plan, html = written
    assert plan["exports"]["routing"]["pools"] == {"chat": "speculative", "code": "plain"}
    rows = _tables(html)["cells"][1:]
    assert {row[0]: row[2] for row in rows if row[0] == "code"} == {"code": "off"}
    assert all(row[2] != "off" for row in rows if row[0] == "chat")


def test_a_page_whose_table_disagreed_would_be_caught(written):
    """The agreement check reads the page, not plan.json: a cell's deployed k changed in the plan
    the page renders shows up as a disagreement."""
    plan, _ = written
    bent = copy.deepcopy(plan)
    bent["cells"][0]["deployed_k"] = bent["cells"][0]["deployed_k"] + 1
    tables = _tables(render(bent))
    settings = {
        (row[0], level): row[2 + i] for row in tables["deploy-settings"][1:] for i, level in enumerate(plan["levels"])
    }
    cells = {(row[0], int(row[1][1:])): row[2] for row in tables["cells"][1:]}
    assert settings != cells


def test_the_page_says_validated_or_why_not_in_what_to_deploy(written):
    plan, _ = written
    ok = dict(plan, validated=True, validation="passed against /runs/v: 12 cells")
    html = render(ok)
    assert html.index("Validated by replay:") < html.index('id="deploy-settings"')
    bad = dict(plan, validation="not validated against /runs/v: every one of its 48 requests failed")
    html = render(bad)
    alarm = html[html.index('id="deploy-gain"') : html.index('id="deploy-settings"')]
    assert 'class="alarm"' in alarm and "every one of its 48 requests failed" in alarm
