"""The report with repeats: the verdict at the top of both renderings with
links to the rows it cites, interval error bars, the speedup table with both
definitions, the prefix cache, and the lossless section when its marts exist."""

from __future__ import annotations

import json
import re

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.report.data import load_report
from specdec.analytics.report.summary import summary_text
from specdec.analytics.report.verdict import row_anchor
from specdec.analytics.report.write import render_html
from tests.support.synthetic_run import make_manifest, repeated_counters, repeated_requests, write_run

SPEC = {"code-0": 1000.0, "code-1": 125.0, "chat-0": 1600.0, "chat-1": 1600.0}


def steady(arm, pid, level, repeat):
    return (2000.0 if pid != "code-1" else 1000.0) if arm == "baseline" else SPEC[pid]


LOSSLESS = """create or replace view lossless as select * from (values
    ('code', 1, 'bfloat16', 4, 3, 1, 0, 0.75, 2, 1, 0.5, null, null, 0.05),
    ('chat', 1, 'bfloat16', 4, 4, 0, 0, 1.0, 2, 2, 1.0, null, null, 0.05))
    t(category, level, dtype, pairs, identical, near_tie, suspect, identity_share, aa_pairs, aa_identical,
      aa_identity_share, cross_level_pairs, cross_level_identical, near_tie_threshold)"""
DIVERGENCES = """create or replace view lossless_divergences as select * from (values
    ('code', 1, 'code-1', 17, 0.01, 'near_tie')) t(category, level, prompt_id, first_divergence_position,
    baseline_margin, class)"""


def data_of(run_dir, *sql):
    con = duckdb.connect(str(build(run_dir)))
    try:
        for s in sql:
            con.execute(s)
        return load_report(con)
    finally:
        con.close()


@pytest.fixture
def repeated(tmp_path):
    return write_run(
        tmp_path,
        requests=repeated_requests(steady, levels=(1,)),
        rounds=[],
        counters=repeated_counters(levels=(1,), hits=lambda a, lv, r: 100.0 * r),
    )


def test_the_verdict_opens_both_renderings_and_links_to_its_rows(repeated):
    data = data_of(repeated, LOSSLESS, DIVERGENCES)
    page, summary = render_html(data), summary_text(data)
    lines = summary.splitlines()
    at = lines.index("verdict:")
    # three labels in the run (chat, code, (system)), each with no noise at all: Holm's levels
    # 1 - 0.05 / 3, / 2 and / 1 by rank
    assert re.fullmatch(
        r"  - chat: faster at every level: 1\.25x \(9[0-9.]+% CI 1\.25-1\.25\) at c1, each gain "
        r"beyond the 5% margin \[n = 4 pairs per level: 2 prompts x 2 repeats\]\.",
        lines[at + 1],
    )
    assert re.match(r"  - code: faster at every level: 4\.00x \(9[0-9.]+% CI 4\.00-4\.00\) at c1", lines[at + 2])
    assert lines[at + 4] == (
        # one level: no calibration check (it compares levels), so the labels' part alone
        "  - calibration: labels hold a 5% family-wise error rate over 3 labels with a 5% "
        "margin declared before the run."
    )
    assert lines[at + 5] == (
        "  - lossless: 0 suspect divergences in 8 greedy pairs (bfloat16, c1; 7/8 identical, "
        "1 near-tie (the baseline's runner-up, margin at most 0.05 nats); A/A floor 3/4 identical)."
    )
    assert lines[at - 1].split()[0] == "speculative"  # after the failures table, before any figure
    # in the page: right after the run line, before the charts and every section
    assert page.index('<h2 id="verdict">') < page.index('<div id="speedup">') < page.index("<h2>Speedup")
    # every link in the verdict points at an element of the page
    verdict_html = page[page.index('<h2 id="verdict">') : page.index('<div id="speedup">')]
    targets = re.findall(r'href="#([^"]+)"', verdict_html)
    assert row_anchor("speedup", "code", 1) in targets and row_anchor("lossless") in targets
    assert len(re.findall(r' id="([^"]+)"', page)) == len(set(re.findall(r' id="([^"]+)"', page)))  # ids unique
    for t in targets:
        assert f'id="{t}"' in page, t
    # the rule in full is in the data dictionary at the end, the verdict links to it
    assert "data-dictionary" in targets and "Satterthwaite" not in verdict_html
    dictionary = page[page.index('<h2 id="data-dictionary">') :]
    assert "Satterthwaite" in dictionary and "step-down" in dictionary and "inconclusive" in dictionary


def test_speedup_table_chart_and_prefix_cache(repeated):
    data = data_of(repeated)
    page, summary = render_html(data), summary_text(data)
    head = page[page.index("<h2>Speedup") : page.index("<h2>Knee")]
    for col in (
        "<th>ci_low</th>",
        "<th>prompts_ci_high</th>",
        "<th>label</th>",
        "<th>pairs</th>",
        "<th>noise_check</th>",
        "<th>ci_level</th>",
        "<th>speedup_mean_of_rates</th>",
        "geometric mean over paired prompts",
    ):
        assert col in head, col
    # the chart draws the interval as a rule from ci_low to ci_high
    spec = json.loads(re.search(r"vegaEmbed\('#speedup', (.*), \{actions: false\}\);", page).group(1))
    bars = [layer for layer in spec["layer"] if layer.get("encoding", {}).get("y2")]
    assert bars and bars[0]["encoding"]["y"]["field"] == "ci_low" and bars[0]["encoding"]["y2"]["field"] == "ci_high"
    # the summary's table: speedup, interval, label
    row = next(ln for ln in summary.splitlines() if ln.startswith("  code "))
    assert row.split(None, 1)[1].strip() == "4.000 [4.00-4.00] faster"
    # prefix cache: 100 of 1000 tokens in repeat 1, reset before every block
    assert "prefix cache: reset before 4/4 blocks (arm, level, repeat); hit rate per block 0.0%-10.0%" in summary
    assert "<h2>Blocks: throughput and prefix cache per arm, level and repeat</h2>" in page


def test_lossless_section_when_its_marts_exist(repeated):
    page = render_html(data_of(repeated, LOSSLESS, DIVERGENCES))
    at = page.index("<h2>Lossless: greedy token identity, classified")
    assert (
        at
        < page.index("<h2>Lossless: every non-identical greedy pair")
        < page.index("<h2>Timed-pass text identity (no margins)")
    )
    assert '<table id="lossless-table">' in page and '<table id="lossless_divergences-table">' in page
    assert f'<tr id="{row_anchor("lossless", "code", 1)}">' in page
    assert "<td>near_tie</td>" in page and "<th>first_divergence_position</th>" in page


def test_no_lossless_section_or_sentence_without_its_marts(repeated):
    data = data_of(repeated, "drop view if exists lossless_divergences", "drop view if exists lossless")
    page, summary = render_html(data), summary_text(data)
    assert data.lossless is None and data.lossless_divergences is None
    assert "Lossless" not in page and "lossless:" not in summary
    assert "<h2>Timed-pass text identity (no margins)</h2>" in page


def test_open_loop_levels_are_named_by_their_setting(tmp_path):
    """An open-loop run keys its levels 1, 2, ... (``level``); a reader
    sees the rates: in the verdict, the summary's tables and the chart's axis."""
    load = {"mode": "poisson", "arrival_seed": 0, "levels": [{"key": 1, "value": 0.5}, {"key": 2, "value": 2.0}]}
    run_dir = write_run(
        tmp_path,
        requests=repeated_requests(steady, levels=(1, 2)),
        rounds=[],
        counters=repeated_counters(levels=(1, 2)),
        manifest=make_manifest(schedule={"repeats": 2, "load": load}),
    )
    data = data_of(run_dir)
    assert data.level_names == {1: "0.5 req/s", 2: "2 req/s"}
    summary, page = summary_text(data), render_html(data)
    verdict = summary[summary.index("verdict:") : summary.index("speedup (")]
    assert "at 0.5 req/s" in verdict and "at 2 req/s" in verdict and " c1" not in verdict
    speedup_head = summary[summary.index("speedup (") :].splitlines()[1]
    assert "0.5 req/s" in speedup_head and "2 req/s" in speedup_head and "c1" not in speedup_head
    # the chart's x axis: the key's position on the scale, the rate as its label
    assert 'datum.value == 1 ? \\"0.5 req/s\\"' in page or 'datum.value == 1 ? "0.5 req/s"' in page
    assert "offered load (Poisson arrivals)" in page
    assert "Speedup vs level, by category" in page and "Speedup vs concurrency" not in page


def test_closed_loop_levels_keep_their_concurrency_names(repeated):
    data = data_of(repeated)
    assert data.level_names == {} and data.level(4) == "c4"
    assert "at c1" in summary_text(data)
    assert "Speedup vs concurrency, by category" in render_html(data)
