"""The speedup_weighted mart: the overall speedup weighted by the service's
category shares, each category's contribution, and missing categories or
excluded levels said, never renormalised silently; and its report section.

The run (conftest: repeated_requests): 2 code and 2 chat prompts, 2 repeats;
baseline 3000 ms for every request, speculative 1000 ms for code (3x) and
3000 ms for chat (1x). Half of the pairs are code, so the unweighted geometric
mean over the pairs is sqrt(3) = 1.732.
"""

from __future__ import annotations

import math

from pytest import approx

from specdec.analytics.report.write import write_report
from tests.support.synthetic_run import failed, make_manifest, repeated_counters, repeated_requests, write_run

SPEC = {"code": 1000.0, "chat": 3000.0}


def e2e(arm, pid, level, repeat):
    return 3000.0 if arm == "baseline" else SPEC[pid.split("-")[0]]


def run(tmp_path, *, levels=(1,), requests=None, **manifest):
    return write_run(
        tmp_path,
        requests=requests or repeated_requests(e2e, levels=levels),
        rounds=[],
        counters=repeated_counters(levels=levels),
        manifest=make_manifest(**manifest),
    )


def rows(query, level=1):
    return {r["category"]: r for r in query(f"select * from speedup_weighted where level = {level}")}


def traffic(**shares):
    return {"path": "mix.jsonl", "rows": 10, "categories": {"code": 1, "chat": 9}, "category_shares": shares}


def test_weighted_speedup_follows_the_mix_not_the_run(tmp_path, query):
    # the service is 10% code: 3000 / (0.1 x 1000 + 0.9 x 3000) = 3000 / 2800 = 1.071
    run(tmp_path, traffic=traffic(code=0.1, chat=0.9))
    got = rows(query)
    w = got["(weighted)"]
    assert w["weights_source"] == "traffic file shares"
    assert w["speedup"] == approx(3000 / 2800)
    assert w["speedup_unweighted"] == approx(math.sqrt(3))  # the run's half-code pairs
    assert w["speedup"] < w["speedup_unweighted"]  # mostly chat: much less than the run's mean says
    assert w["speedup_geomean"] == approx(3**0.1)  # same statistic as the unweighted, weights 0.1/0.9
    assert w["speedup_covered"] == approx(w["speedup"])
    assert (w["share"], w["covered_share"], w["pairs"], w["prompts"]) == (approx(1.0), approx(1.0), 8, 4)
    assert (w["baseline_e2e_ms_mean"], w["speculative_e2e_ms_mean"]) == (approx(3000), approx(2800))
    assert w["saved_fraction"] == approx(1 / 15)  # 200 of 3000 ms
    assert w["excluded_reason"] is None and w["note"] is None
    # contributions: code is 10% of the baseline time and saves 0.1 x 2000 / 3000 of it; chat saves nothing
    code, chat = got["code"], got["chat"]
    assert (code["speedup"], code["speedup_geomean"], chat["speedup"]) == (approx(3.0), approx(3.0), approx(1.0))
    assert (code["share"], code["share_used"], code["run_share"]) == (approx(0.1), approx(0.1), approx(0.5))
    assert (code["baseline_time_share"], chat["baseline_time_share"]) == (approx(0.1), approx(0.9))
    assert (code["saved_fraction"], chat["saved_fraction"]) == (approx(2 / 30), approx(0.0))
    assert code["saved_fraction"] + chat["saved_fraction"] == approx(1 - 1 / w["speedup"])
    assert (code["pairs"], code["prompts"], code["baseline_e2e_ms_mean"], code["speculative_e2e_ms_mean"]) == (
        4,
        2,
        approx(3000),
        approx(1000),
    )


def test_a_given_mix_wins_over_the_traffic_shares_and_can_raise_the_figure(tmp_path, query):
    # --mix code=0.9,chat=0.1: 3000 / (0.9 x 1000 + 0.1 x 3000) = 2.5, above the unweighted 1.732
    run(tmp_path, traffic=traffic(code=0.1, chat=0.9), mix={"code": 0.9, "chat": 0.1})
    w = rows(query)["(weighted)"]
    assert w["weights_source"] == "given (--mix)"
    assert w["speedup"] == approx(2.5) and w["speedup"] > w["speedup_unweighted"]
    assert w["speedup_geomean"] == approx(3**0.9)


def test_a_category_of_the_mix_missing_from_the_run_is_named_not_renormalised(tmp_path, query):
    run(tmp_path, mix={"code": 0.3, "chat": 0.5, "structured": 0.2})
    got = rows(query)
    w = got["(weighted)"]
    assert (w["speedup"], w["speedup_geomean"]) == (None, None)
    assert w["excluded_reason"] == ("no figure for structured (share 0.200): no request of this category at this level")
    # what the measured 80% of the mix gives, said as such: (0.3 + 0.5) 3000 / (0.3 x 1000 + 0.5 x 3000)
    assert (w["speedup_covered"], w["covered_share"]) == (approx(2400 / 1800), approx(0.8))
    assert w["note"] == (
        "speedup_covered renormalises the shares of the categories with a figure (covered share 0.800 of 1.000)"
    )
    s = got["structured"]
    assert (s["share"], s["speedup"], s["pairs"], s["share_used"]) == (approx(0.2), None, 0, None)
    assert s["excluded_reason"] == "no request of this category at this level"
    assert s["note"].startswith("has a share but no figure")
    assert got["code"]["share_used"] == approx(0.3 / 0.8)


def test_a_category_without_a_pair_is_named(tmp_path, query):
    # every speculative chat request failed; max_error_rate 1 keeps the level, so chat has no pair
    reqs = [
        failed(r) if (r.arm, r.category) == ("speculative", "chat") else r for r in repeated_requests(e2e, levels=(1,))
    ]
    run(tmp_path, requests=reqs, max_error_rate=1.0, traffic=traffic(code=0.5, chat=0.5))
    got = rows(query)
    assert got["chat"]["excluded_reason"] == "no prompt succeeded in both arms (no pair)"
    w = got["(weighted)"]
    assert w["speedup"] is None and w["excluded_reason"].startswith("no figure for chat (share 0.500)")
    assert (w["speedup_covered"], w["speedup_unweighted"]) == (approx(3.0), approx(3.0))


def test_a_category_outside_the_mix_contributes_nothing(tmp_path, query):
    run(tmp_path, mix={"code": 1.0})
    got = rows(query)
    assert got["(weighted)"]["speedup"] == approx(3.0)
    chat = got["chat"]
    assert (chat["share"], chat["share_used"], chat["saved_fraction"], chat["speedup"]) == (0.0, 0.0, 0.0, approx(1.0))
    assert chat["note"] == "no share in the mix: contributes nothing"


def test_an_excluded_level_gives_no_figure_and_says_why(tmp_path, query):
    reqs = repeated_requests(e2e, levels=(1, 2))
    reqs[next(i for i, r in enumerate(reqs) if (r.arm, r.level) == ("baseline", 2))] = failed(
        reqs[next(i for i, r in enumerate(reqs) if (r.arm, r.level) == ("baseline", 2))]
    )
    run(tmp_path, levels=(1, 2), requests=reqs, traffic=traffic(code=0.1, chat=0.9))
    w2 = rows(query, 2)["(weighted)"]
    assert (w2["speedup"], w2["speedup_unweighted"], w2["speedup_covered"]) == (None, None, None)
    assert w2["excluded_reason"].startswith("baseline level failed (error rate 0.125 > max 0.050)")
    assert rows(query, 2)["code"]["speedup"] is None
    assert rows(query, 1)["(weighted)"]["speedup"] == approx(3000 / 2800)


def test_without_recorded_shares_only_the_unweighted_figure_is_given(tmp_path, query):
    run(tmp_path)  # conftest's manifest: traffic.categories is a list, no shares, no mix
    got = rows(query)
    w = got["(weighted)"]
    assert (w["weights_source"], w["share"], w["speedup"], w["speedup_covered"]) == (None, None, None, None)
    assert w["excluded_reason"].startswith("no category shares")
    assert w["speedup_unweighted"] == approx(math.sqrt(3))
    assert (got["code"]["share"], got["code"]["speedup"], got["code"]["note"]) == (None, approx(3.0), None)


def test_older_manifests_weigh_by_the_recorded_row_counts(tmp_path, query):
    run(tmp_path, traffic={"path": "mix.jsonl", "rows": 4, "categories": {"code": 1, "chat": 3}})
    w = rows(query)["(weighted)"]
    assert w["weights_source"] == "traffic file row counts"
    assert w["speedup"] == approx(3000 / (0.25 * 1000 + 0.75 * 3000))


def test_the_report_shows_the_weighted_figure_and_the_traffic_charts(tmp_path):
    curve = {"known": 3, "of": 4, "bin_s": 1, "start_s": 0, "requests_per_s": [2.0, 0.0, 1.0]}
    run(tmp_path, traffic={**traffic(code=0.1, chat=0.9), "arrival_rate": curve}, mix={"code": 0.9, "chat": 0.1})
    page = write_report(tmp_path)[0].read_text(encoding="utf-8")
    assert "<h2>Speedup weighted by the traffic&#x27;s category shares</h2>" in page
    assert "weights: given (--mix)" in page
    assert '<table id="speedup_weighted-table">' in page
    assert '<div id="traffic_shares"></div>' in page and '"given --mix"' in page
    assert '<div id="traffic_arrival"></div>' in page and "1 s bins, 3 of 4 rows timed" in page


def test_the_report_draws_no_arrival_curve_for_untimed_traffic(tmp_path):
    run(tmp_path, traffic=traffic(code=0.1, chat=0.9))
    page = write_report(tmp_path)[0].read_text(encoding="utf-8")
    assert '<div id="traffic_shares"></div>' in page
    assert "traffic_arrival" not in page


def test_the_weighted_figure_has_a_measurement_interval(tmp_path, query):
    """Repeat 1 runs the speculative arm 1.2x slower for every prompt: weighted
    block figures (shares 0.5/0.5) ln(3000 / 2000) and ln(3000 / 2400). The
    weighted series moves by d = ln 1.2 between the repeats at both levels
    alike: residuals +-d / 2 at each level, V = d^2 / 2, all of it shared by
    the levels of a repeat, so df = repeats - 1 = 1, and the interval is the
    mean of the two block figures times exp(-+t(0.975, 1) sqrt(V / 2))."""
    slow = lambda arm, pid, level, r: e2e(arm, pid, level, r) * (1.2 if arm == "speculative" and r == 1 else 1)  # noqa
    run(tmp_path, requests=repeated_requests(slow), traffic=traffic(code=0.5, chat=0.5))
    w = rows(query)["(weighted)"]
    figures = [math.log(3000 / 2000), math.log(3000 / 2400)]
    centre = math.exp(sum(figures) / 2)
    assert w["ci_low"] < centre < w["ci_high"]
    h = 12.706204736174698 * math.log(1.2) / 2
    assert (w["ci_low"], w["ci_high"]) == (approx(centre * math.exp(-h)), approx(centre * math.exp(h)))
    assert rows(query)["code"]["ci_low"] is None  # category rows: their interval is in the speedup mart


def test_one_repeat_gives_no_weighted_interval(tmp_path, query):
    write_run(
        tmp_path,
        requests=repeated_requests(e2e, levels=(1,), repeats=1),
        rounds=[],
        counters=repeated_counters(levels=(1,), repeats=1),
        manifest=make_manifest(traffic=traffic(code=0.5, chat=0.5)),
    )
    assert rows(query)["(weighted)"]["ci_low"] is None


def test_terminal_summary_shows_the_weighted_figure(tmp_path, query):
    import duckdb

    from specdec.analytics.build import build
    from specdec.analytics.report.data import load_report
    from specdec.analytics.report.summary import summary_text

    run(tmp_path, traffic=traffic(code=0.1, chat=0.9))
    con = duckdb.connect(str(build(tmp_path)), read_only=True)
    text = summary_text(load_report(con))
    assert "speedup weighted by the traffic's category shares (traffic file shares;" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("c1 "))
    assert "1.071" in line and "1.732" in line  # 3000 / 2800, beside the unweighted sqrt(3)
