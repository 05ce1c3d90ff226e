"""The forest plot that opens the report (analytics/report/forest.py): its rows and spec from
small hand-made speedup rows (NULL intervals, no rows, one category), and its place on the
page of a built run, a run of named arms (two engines) and a run where every request failed."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.analytics.report.data import Table, load_report
from specdec.analytics.report.forest import (
    COLOURS,
    NOT_MEASURED,
    SEQUENTIAL_TEXT,
    axis_ticks,
    forest_chart,
    forest_rows,
    forest_text,
    run_margin,
)
from specdec.analytics.report.write import render_html, write_report
from tests.support.named_run import write_named_run
from tests.support.synthetic_run import failed, make_requests, repeated_counters, repeated_requests, write_run


def row(category, level, speedup, low, high, label, repeats=5, pairs=40, margin=0.05, reason=None):
    eq = (
        (math.exp(0.7 * math.log(low / speedup)) * speedup, math.exp(0.7 * math.log(high / speedup)) * speedup)
        if low
        else (None, None)
    )
    return {
        "equivalence_low": eq[0],
        "equivalence_high": eq[1],
        "category": category,
        "level": level,
        "speedup": speedup,
        "ci_low": low,
        "ci_high": high,
        "ci_level": 0.99 if low is not None else None,
        "label": label,
        "repeats": repeats,
        "pairs": pairs,
        "margin": margin,
        "excluded_reason": reason,
    }


MART = [
    row("(system)", 1, 1.4, 1.3, 1.5, "faster", pairs=5),
    row("code", 4, 2.2, 2.0, 2.4, "faster"),
    row("code", 1, 2.5, 2.3, 2.7, "faster"),
    row("chat", 1, 1.01, 0.97, 1.04, "equivalent"),
    row("chat", 4, 0.9, 0.85, 0.95, "slower"),
    row("math", 1, 1.02, None, None, None, repeats=1, pairs=8),  # one repeat: no interval
    row("math", 4, None, None, None, None, repeats=0, pairs=0, reason="level failed: baseline c4 error rate 0.5"),
]


def layers(spec: dict) -> list[dict]:
    return spec["hconcat"][0]["layer"]


def layer_with(spec: dict, channel: str, field: str) -> dict:
    (found,) = [lyr for lyr in layers(spec) if lyr.get("encoding", {}).get(channel, {}).get("field") == field]
    return found


def test_rows_are_ordered_and_null_is_not_measured_never_zero():
    rows = forest_rows(MART)
    assert [r["row"] for r in rows] == [
        "chat \u00b7 c1",
        "chat \u00b7 c4",
        "code \u00b7 c1",
        "code \u00b7 c4",
        "math \u00b7 c1",
        "math \u00b7 c4",
        "(system) \u00b7 c1",
    ]
    by = {r["row"]: r for r in rows}
    assert all(agrees(r, 0.05) for r in rows)  # the hand-made labels follow the rule
    assert not agrees({**by["chat \u00b7 c1"], "label": "inconclusive"}, 0.05)  # a bar inside the band
    assert not agrees({**by["code \u00b7 c1"], "label": "equivalent"}, 0.05)  # a bar right of 1x
    assert by["chat \u00b7 c4"]["label"] == "slower"
    assert by["(system) \u00b7 c1"]["text"] == "1.40x (1.30\u20131.50) \u00b7 5 repeats, whole-level throughput"
    assert by["chat \u00b7 c4"]["text"] == "0.90x (0.85\u20130.95) \u00b7 5 repeats, 40 pairs"
    no_interval, no_speedup = by["math \u00b7 c1"], by["math \u00b7 c4"]
    assert no_interval["label"] == NOT_MEASURED and no_interval["ci_low"] is None and no_interval["speedup"] == 1.02
    assert no_interval["text"] == "1.02x, interval not measured \u00b7 1 repeat, 8 pairs"
    assert no_speedup["label"] == NOT_MEASURED and no_speedup["speedup"] is None
    assert no_speedup["text"] == "not measured: level failed: baseline c4 error rate 0.5"
    # a level key becomes its name (open loop) when the report names levels
    assert forest_rows(MART[:1], lambda k: "0.5 req/s")[0]["row"] == "(system) \u00b7 0.5 req/s"


def test_a_bound_near_1_keeps_its_side_of_1_in_the_text():
    """A slower row whose interval ends at 0.997 must not read '(0.90–1.00)', as if it touched 1."""
    (slower,) = forest_rows([row("chat", 8, 0.94, 0.90, 0.997, "slower")])
    assert slower["text"] == "0.94x (0.90–0.997) · 5 repeats, 40 pairs"
    (faster,) = forest_rows([row("code", 8, 1.03, 1.004, 1.06, "faster")])
    assert faster["text"].startswith("1.03x (1.004–1.06)")


def test_the_spec_draws_intervals_points_band_and_one_on_a_log_axis():
    rows = forest_rows(MART)
    spec = forest_chart(rows, run_margin(MART, 0.2))
    band = layer_with(spec, "x", "low")
    assert band["data"]["values"] == [{"low": pytest.approx(1 / 1.05), "high": pytest.approx(1.05)}]
    assert band["encoding"]["x2"]["field"] == "high"
    assert band["encoding"]["x"]["scale"]["type"] == "log"
    assert layer_with(spec, "x", "one")["data"]["values"] == [{"one": 1.0}]
    # the interval: only rows that have one; the point: only rows with a speedup (no 0 for NULL)
    bars = layer_with(spec, "x", "ci_low")
    assert bars["encoding"]["x2"]["field"] == "ci_high"
    assert {r["row"] for r in bars["data"]["values"]} == {r["row"] for r in rows if r["ci_low"] is not None}
    # the thick bar: the interval equivalent reads, on the rows that have one, inside the thin bar
    thick = layer_with(spec, "x", "equivalence_low")
    assert thick["encoding"]["x2"]["field"] == "equivalence_high"
    assert {r["row"] for r in thick["data"]["values"]} == {r["row"] for r in rows if r["ci_low"] is not None}
    assert all(
        r["ci_low"] < r["equivalence_low"] < r["equivalence_high"] < r["ci_high"] for r in thick["data"]["values"]
    )
    assert "TOST 0.98\u20131.03" in next(r["text"] for r in rows if r["row"] == "chat \u00b7 c1")
    points = layer_with(spec, "x", "speedup")
    assert "math \u00b7 c1" in {r["row"] for r in points["data"]["values"]}
    assert "math \u00b7 c4" not in {r["row"] for r in points["data"]["values"]}
    for lyr in layers(spec):
        for v in lyr["data"]["values"]:
            assert all(v.get(k) != 0 for k in ("speedup", "ci_low", "ci_high")), v
    # every row on the y axis, in order, and its text (repeats used) beside it
    assert points["encoding"]["y"]["sort"] == [r["row"] for r in rows]
    # rows with nothing drawn (math c4) keep their line: plot and text share one explicit domain
    assert points["encoding"]["y"]["scale"]["domain"] == [r["row"] for r in rows]
    assert spec["hconcat"][1]["encoding"]["y"]["scale"]["domain"] == [r["row"] for r in rows]
    text = spec["hconcat"][1]
    assert [v["text"] for v in text["data"]["values"]] == [r["text"] for r in rows]
    assert "5 repeats" in text["data"]["values"][0]["text"]
    # colour by label, one fixed colour per label, not measured included when present
    colour = points["encoding"]["color"]
    assert colour["field"] == "label"
    assert dict(zip(colour["scale"]["domain"], colour["scale"]["range"])) == COLOURS
    # the axis: ratio ticks including 1, inside the domain, labelled as 'x' multiples
    axis, domain = band["encoding"]["x"]["axis"], band["encoding"]["x"]["scale"]["domain"]
    assert 1.0 in axis["values"] and 2.0 in axis["values"]
    assert all(domain[0] <= t <= domain[1] for t in axis["values"])
    assert domain[0] < 0.85 and domain[1] > 2.7  # every interval fits
    assert "'x'" in axis["labelExpr"]


def test_a_single_category_and_no_rows():
    one = forest_rows([row("chat", 1, 0.99, 0.96, 1.03, "equivalent")])
    spec = forest_chart(one, 0.05)
    assert len(spec["hconcat"][1]["data"]["values"]) == 1
    assert NOT_MEASURED not in layer_with(spec, "x", "speedup")["encoding"]["color"]["scale"]["domain"]
    ticks = layer_with(spec, "x", "low")["encoding"]["x"]["axis"]["values"]
    assert 1.0 in ticks and len(ticks) >= 3  # a narrow axis still gets ticks around 1
    assert forest_chart([], 0.05) is None
    assert run_margin([], 0.1) == 0.1  # no rows: the manifest's margin


@pytest.mark.parametrize("low, high", [(0.88, 2.9), (0.93, 1.09), (0.5, 1.2), (0.2, 12.0), (0.3, 0.9)])
def test_axis_ticks_are_inside_spaced_and_few(low, high):
    ticks = axis_ticks(low, high)
    assert 2 <= len(ticks) <= 9
    assert all(low <= t <= high for t in ticks)
    assert all(math.log(b / a) >= math.log(high / low) / 10 for a, b in zip(ticks, ticks[1:]))
    if low <= 1 <= high:
        assert 1.0 in ticks


def test_the_paragraph_states_the_margin_band():
    text = forest_text(0.05)
    assert "0.95x to 1.05x" in text and "5%" in text
    assert "1.10x" in forest_text(0.1) and "0.91x" in forest_text(0.1)
    # a sequential run's rows are each its deciding look's interval: the paragraph says so, the fixed one's not
    assert "sequential" not in forest_text(0.05)
    assert forest_text(0.05, sequential=True).endswith(SEQUENTIAL_TEXT) and "look that decided it" in SEQUENTIAL_TEXT


def _spec(page: str, name: str) -> dict:
    return json.loads(re.search(rf"vegaEmbed\('#{name}', (.*?), \{{actions: false\}}\);", page).group(1))


def _data(run_dir):
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    try:
        return load_report(con)
    finally:
        con.close()


NOISE = {0: 1.0, 1: 1.03, 2: 0.99}  # chat's per-repeat factor: near 1 and noisy, so its label is not faster


def e2e(arm, pid, level, r):
    if arm == "baseline":
        return 2000.0
    return 1000.0 if pid.startswith("code") else 2000.0 / (1.005 * NOISE[r] * (1 + 0.01 * level))


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    return _data(write_run(run, requests=repeated_requests(e2e, repeats=3), counters=repeated_counters(repeats=3)))


def agrees(r: dict, margin: float) -> bool:
    """The label agrees with the drawn bars as the paragraph under the plot says: faster / slower
    exactly when the thin bar clears 1x; otherwise equivalent exactly when the thick bar lies
    inside the band."""
    if r["ci_low"] is None:
        return r["label"] == NOT_MEASURED
    side = "faster" if r["ci_low"] > 1 else "slower" if r["ci_high"] < 1 else None
    if side or r["label"] in ("faster", "slower"):
        return r["label"] == side
    inside = 1 / (1 + margin) <= r["equivalence_low"] and r["equivalence_high"] <= 1 + margin
    return r["label"] == ("equivalent" if inside else "inconclusive")


def test_the_forest_opens_the_page_and_the_details_close_it(repeated):
    page = render_html(repeated)
    at = page.index('<div id="forest"></div>')
    assert at < page.index("Requests and failures per arm and level") < page.index('<h2 id="verdict">')
    assert page.index('<h2 id="verdict">') < page.index('<div id="speedup">')
    assert page.index('<h2 id="data-dictionary">') > page.index("<h2>Run manifest")
    assert "step-down" in page[page.index('<h2 id="data-dictionary">') :]
    assert 'href="#data-dictionary"' in page[at : page.index("Requests and failures")]
    spec = _spec(page, "forest")
    got = {(v["category"], v["level"]): v for v in spec["hconcat"][1]["data"]["values"]}
    for (cat, level), v in got.items():
        mart = next(r for r in repeated.speedup.dicts() if (r["category"], f"c{r['level']}") == (cat, level))
        assert v["speedup"] == mart["speedup"] and v["label"] == mart["label"] and v["repeats"] == mart["repeats"] == 3
        # the plot cannot contradict the label: the bar drawn is the interval the label reads
        assert agrees(v, mart["margin"]), v
    assert {k[0] for k in got} == {"code", "chat", "(system)"} and {k[1] for k in got} == {"c1", "c2"}
    assert {v["label"] for v in got.values()} >= {"faster", "inconclusive"}


def test_a_run_without_verdict_rows_says_so_in_place_of_the_plot(repeated):
    empty = replace(repeated, speedup=Table(repeated.speedup.columns, ()))
    page = render_html(empty)
    assert "vegaEmbed('#forest'" not in page
    assert page.index("No speedup was measured in this run") < page.index("Requests and failures per arm and level")


def test_every_request_failed_reads_not_measured(tmp_path):
    run = write_run(tmp_path, requests=[failed(r) for r in make_requests()], rounds=[])
    path, _ = write_report(run)
    page = path.read_text(encoding="utf-8")
    if "vegaEmbed('#forest'" in page:
        values = _spec(page, "forest")["hconcat"][1]["data"]["values"]
        assert values and all(v["label"] == NOT_MEASURED and v["speedup"] is None for v in values)
    else:
        assert "No speedup was measured in this run" in page
    assert (run / "charts").exists()


def test_each_comparison_of_a_two_engine_run_opens_with_its_forest(tmp_path):
    run = write_named_run(tmp_path / "named", two_engines=True)
    write_report(run)
    for arm in ("ngram", "ngram2"):
        page = (run / f"report-{arm}.html").read_text(encoding="utf-8")
        assert page.index('<div id="forest"></div>') < page.index("Requests and failures per arm and level")
        values = _spec(page, "forest")["hconcat"][1]["data"]["values"]
        # one repeat: every speedup is there, no interval, so every label reads not measured
        assert values and all(v["speedup"] is not None and v["ci_low"] is None for v in values)
        assert all(v["label"] == NOT_MEASURED and "interval not measured" in v["text"] for v in values)
        assert (run / "charts" / f"{arm}-forest.png").stat().st_size > 1000
    # report.html puts the comparisons side by side: its forest names each row's comparison
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.index('<div id="forest"></div>') < page.index("<h2>Per category and level")
    rows = {v["row"] for v in _spec(page, "forest")["hconcat"][1]["data"]["values"]}
    assert "code \u00b7 c1 \u00b7 ngram" in rows and "code \u00b7 c1 \u00b7 ngram2" in rows
    assert (run / "charts" / "forest.png").stat().st_size > 1000
