"""``specdec report RUN_DIR``: one self-contained HTML file plus a terminal summary.

The HTML inlines the Vega/Vega-Lite/vega-embed bundle shipped in
vl-convert-python, so it renders with no network. Every number comes from the
marts in ``specdec.duckdb``, read once into a ``ReportData``
(``report_data.py``) that this module renders to HTML and ``summary.py`` to
text; every table names the definition it uses. The page opens with the
notices (a failed level, an unfinished run), then the verdict as a forest plot
(``forest.py``: every (category, level) interval against 1 and the margin band)
with the rule in one paragraph, then the per-level failure table, then the
verdict in words (``verdict.py``), each figure of it linked to the mart row it
comes from (rows carry ``verdict.row_anchor`` ids). The rule in full and the
intervals' method close the page, in its data dictionary section.

Every string from the run goes through ``html.esc`` or, inside ``<script>``,
``html.script_json`` (``analytics/report/html.py``): categories, prompts, outputs,
error texts and manifest fields are data, never markup.
"""

from __future__ import annotations

import json
from pathlib import Path

from specdec.analytics.build import build
from specdec.analytics.fit import RULE as FIT_RULE
from specdec.analytics.intervals import METHOD
from specdec.analytics.labels import RULE as LABEL_RULE
from specdec.analytics.report import compat as compat_section
from specdec.analytics.report import side_by_side
from specdec.analytics.report.chart_text import chart_safe
from specdec.analytics.report.data import ReportData, Table, load_report
from specdec.analytics.report.forest import forest_chart, forest_html, forest_rows, run_margin
from specdec.analytics.report.html import banner, esc, script_json, table
from specdec.analytics.report.page import chart_divs, page
from specdec.analytics.report.summary import summary_text
from specdec.analytics.report.verdict import Sentence, row_anchor
from specdec.analytics.sampling_check import METHOD as SAMPLING_METHOD
from specdec.atomic import atomic_write_bytes
from specdec.levels import name_of
from specdec.runfolder import DB_NAME, REPORT, chart_png

__all__ = ["DEFINITIONS", "render_html", "summary_text", "write_report"]

DEFINITIONS = {
    "mean_acceptance_length": "per-round: 1 + sum(accepted) / verify rounds, pooled over all rounds (includes the bonus token)",
    "acceptance_rate": "per-token: sum(accepted) / sum(proposed), pooled",
    "speedup": "per category: geometric mean over paired prompts of baseline e2e / speculative e2e, a pair being "
    "the same prompt at the same level and repeat (TTFT included; under forced length the same as the "
    "per-prompt ratio of tokens/s). '(system)': geometric mean over repeats of the whole-level throughput "
    "ratio, speculative block / baseline block of the same repeat (capacity). Successful requests only; "
    "n/a with excluded_reason when the level failed in either arm. speedup_mean_of_rates is the old "
    "ratio of mean per-request tokens/s, shown for comparison only (it favours requests that finish fast)",
    "intervals": METHOD + " ci_low/ci_high: the family-wise interval the label reads (ci_level says its level); "
    "pointwise_ci_low/high: the same at 95%; prompts_ci_low/high: also the choice of prompts from the "
    "category (prompts and runs together).",
    "aa": "aa_speedup: the baseline against itself, repeat r + 1 over repeat r, same prompts and level, with the "
    "same statistic: the host's drift between repeats, which the paired design cancels (no check). " + FIT_RULE,
    "label": LABEL_RULE,
    "knee": "below_one_level: first level labelled slower; gain_lost_level: first "
    "level past the peak where speedup - 1 < peak_fraction x (peak - 1); n/a when it never happens",
    "prefix_cache": "prefix_cache_hit_rate = hits / queries, deltas of vLLM's prefix-cache counters around one block "
    "(one arm, level and repeat); prefix_cache_reset: the cache was reset just before the block",
    "tpot_ms": "(e2e - ttft) / (output tokens - 1), per request",
    "itl_chunk_gap_ms": "gap between streamed chunks; one chunk can carry several tokens under speculation",
    "capacity_under_slo": "the highest measured level up to which every level meets the SLO (p95 TTFT and p95 TPOT over "
    "all successful requests of the arm at that level, and the level's error budget); a pass above a "
    "failing level does not count; sustains_all_measured: the limit lies above the levels measured; "
    "capacity_ratio = speculative / baseline max_level, as coarse as the level grid",
    "acceptance_positions": "position i of a draft is accepted when the round accepted i or more tokens; "
    "acceptance_at_position = such rounds / verify rounds (summed over positions: mean "
    "acceptance length - 1); conditional_acceptance: given the draft got to i; "
    "first_rejection_share: rounds whose first rejected token is at i",
    "acceptance_positions_engine": "the same per-position share from the engine's own per-position counter "
    "(accepted at position i / verify rounds, per level, repeats pooled): the "
    "per-position figure of an engine without per-round rows; captured_accepted "
    "and diff_accepted check it against the captured rounds where there are some",
    "resource_cost": "sampled about once a second during every block: rss = resident memory of the server's process "
    "tree (API server and engine core; n/a for servers specdec did not start), kv_cache_usage = "
    "vllm:kv_cache_usage_perc (0..1); rss_peak_vs_baseline = the speculative arm's peak / the "
    "baseline's at the same level",
    "speedup_by_input_length": "input_bucket by prompt tokens: short < 256, medium 256-1023, long >= 1024; "
    "speedup: geometric mean of paired e2e ratios, every category pooled, no interval "
    "(read the speedup table's intervals for claims)",
    "acceptance_definitions": "the same rounds as vLLM (pooled: 1 + sum(a) / rounds; sum(a) / sum(k)), AIPerf (mean "
    "per request of mean (a + 1); (a + 1) / (k + 1) pooled), Spec-Bench (mean tokens per "
    "decode step, no-draft steps included), SGLang (output tokens / verify rounds) and "
    "llama.cpp (accepted / tested, = vLLM's rate here) define them; (all): pooled over "
    "categories, with the macro average over categories beside it. A figure quoted from "
    "another tool compares with its own column only",
    "acceptance_requests": "from the engine's own per-request stats (vLLM: metrics.speculative_decoding; llama.cpp: "
    "timings.draft_n and draft_n_accepted), not the rounds: acceptance_rate = accepted / "
    "proposed tokens, pooled over the level; acceptance_rate_per_request = the mean of each "
    "request's rate; on (all) rows, the engine's counters over the same blocks and the "
    "difference (0: every drafted token is in a request's stats)",
    "acceptance_by_context": "verify rounds by the request's context length before the step (prompt + output so "
    "far); tokens_per_round: tokens one target forward yields, bonus token included",
    "error_rate": "requests_failed / requests of the arm and level; a level fails when error_rate > max_error_rate, "
    "and no speedup or lossless figure is computed from it",
}

SPEEDUP_COLUMNS = (
    "category",
    "level",
    "speedup",
    "ci_low",
    "ci_high",
    "ci_level",
    "label",
    "clears_margin",
    "detectable_effect",
    "repeats_needed",
    "pairs",
    "prompts",
    "repeats",
    "df",
    "p_value",
    "pointwise_ci_low",
    "pointwise_ci_high",
    "prompts_ci_low",
    "prompts_ci_high",
    "aa_speedup",
    "aa_pairs",
    "noise_ratio",
    "noise_p_value",
    "noise_check",
    "speedup_mean_of_rates",
    "baseline_tokens_per_s",
    "speculative_tokens_per_s",
    "label_basis",
    "excluded_reason",
)


def _charts(data: ReportData) -> dict[str, dict]:
    """Vega-Lite specs of the charts that have data (a chart of nothing is left out)."""
    import altair as alt  # heavy: altair, imported only when used

    speed, thr = data.chart_speedup(), data.chart_throughput()
    levels = sorted({r["level"] for r in thr} | {r["level"] for r in speed})
    # an explicit domain: with one plotted level a log scale would otherwise
    # collapse and label the point with a neighbouring tick
    domain = [levels[0], levels[-1]] if len(levels) > 1 else [levels[0] / 2, levels[0] * 2] if levels else alt.Undefined
    names = data.level_names
    if names:  # open loop: the key is a position; the axis shows each level's setting
        mode = (data.manifest.schedule or {}).get("load", {}).get("mode")
        x_title = {
            "poisson": "offered load (Poisson arrivals)",
            "recorded": "recorded clock, time scale (smaller: faster)",
        }.get(mode, "level")
        label_expr = " : ".join(f"datum.value == {k} ? {json.dumps(v)}" for k, v in sorted(names.items()))
        axis = alt.Axis(values=levels, labelExpr=f"{label_expr} : 'level ' + datum.value")
    else:
        x_title, axis = "concurrent requests", alt.Axis(values=levels, format="d")
    x = alt.X("level:Q", scale=alt.Scale(type="log", base=2, domain=domain, nice=False), title=x_title, axis=axis)
    charts = {}
    forest = forest_chart(forest_rows(data.speedup.dicts(), data.level), _margin(data)) if data.has_replay else None
    if forest:  # the first screen: every label with its interval (``forest.py``)
        charts["forest"] = forest
    if speed:
        base = alt.Chart(alt.Data(values=speed)).encode(
            x=x,
            y=alt.Y("speedup:Q", title="speedup (speculative / baseline)"),
            color=alt.Color("category:N"),
            tooltip=[
                "category:N",
                "level:Q",
                alt.Tooltip("speedup:Q", format=".2f"),
                alt.Tooltip("ci_low:Q", format=".2f"),
                alt.Tooltip("ci_high:Q", format=".2f"),
                "label:N",
                "pairs:Q",
            ],
        )
        layers = base.mark_line(point=True)
        bars = [r for r in speed if r["ci_low"] is not None and r["ci_high"] is not None]
        if bars:  # the family-wise interval its label reads, as an error bar
            layers += (
                alt.Chart(alt.Data(values=bars))
                .mark_rule(strokeWidth=2)
                .encode(x=x, y="ci_low:Q", y2="ci_high:Q", color=alt.Color("category:N"))
            )
        rule = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
        charts["speedup"] = (
            (layers + rule)
            .properties(
                width=520,
                height=300,
                title=f"Speedup vs {'level' if names else 'concurrency'}, by category (bars: family-wise interval)",
            )
            .to_dict()
        )
    if thr:
        charts["throughput"] = (
            alt.Chart(alt.Data(values=thr))
            .mark_line(point=True)
            .encode(
                x=x,
                y=alt.Y("output_tokens_per_s:Q", title="output tokens/s (whole level)"),
                color="arm:N",
            )
            .properties(width=520, height=260, title="System throughput by arm")
            .to_dict()
        )
    if data.acceptance_positions is not None:
        charts["acceptance_positions"] = (
            alt.Chart(
                alt.Data(
                    values=[
                        {k: r[k] for k in ("category", "position", "acceptance_at_position", "conditional_acceptance")}
                        for r in data.acceptance_positions.dicts()
                    ]
                )
            )
            .mark_line(point=True)
            .encode(
                x=alt.X("position:O", title="draft position"),
                y=alt.Y(
                    "acceptance_at_position:Q",
                    title="share of rounds accepted up to this position",
                    scale=alt.Scale(domain=[0, 1]),
                ),
                color="category:N",
                tooltip=[
                    "category:N",
                    "position:O",
                    alt.Tooltip("acceptance_at_position:Q", format=".3f"),
                    alt.Tooltip("conditional_acceptance:Q", format=".3f"),
                ],
            )
            .properties(width=420, height=240, title="Acceptance by draft position (speculative arm)")
            .to_dict()
        )
    elif data.acceptance_positions_engine is not None:  # no rounds: the engine's per-position counter
        charts["acceptance_positions"] = (
            alt.Chart(
                alt.Data(
                    values=[
                        {
                            "level": name_of(r["level"], names),
                            "position": r["position"],
                            "acceptance_at_position": r["acceptance_at_position"],
                        }
                        for r in data.acceptance_positions_engine.dicts()
                    ]
                )
            )
            .mark_line(point=True)
            .encode(
                x=alt.X("position:O", title="draft position"),
                y=alt.Y(
                    "acceptance_at_position:Q",
                    title="share of rounds accepted up to this position",
                    scale=alt.Scale(domain=[0, 1]),
                ),
                color=alt.Color("level:N", title="level"),
                tooltip=["level:N", "position:O", alt.Tooltip("acceptance_at_position:Q", format=".3f")],
            )
            .properties(
                width=420, height=240, title="Acceptance by draft position, from the engine's counter (speculative arm)"
            )
            .to_dict()
        )
    if data.latency_cdf is not None:
        rows = [
            {"arm": r["arm"], "level": name_of(r["level"], names), "share": r["share"], "e2e_ms": r["e2e_ms"]}
            for r in data.latency_cdf.dicts()
            if r["e2e_ms"] is not None
        ]
        charts["latency_cdf"] = (
            alt.Chart(alt.Data(values=rows))
            .mark_line()
            .encode(
                x=alt.X("e2e_ms:Q", title="end-to-end latency (ms)"),
                y=alt.Y("share:Q", title="share of requests at or below", scale=alt.Scale(domain=[0, 1])),
                color="arm:N",
                strokeDash="arm:N",
                facet=alt.Facet("level:N", columns=4, title=None, sort=list(dict.fromkeys(r["level"] for r in rows))),
                tooltip=[
                    "arm:N",
                    "level:N",
                    alt.Tooltip("share:Q", format=".0%"),
                    alt.Tooltip("e2e_ms:Q", format=".0f"),
                ],
            )
            .properties(width=240, height=180, title="Latency CDF per arm and level (successful requests)")
            .to_dict()
        )
    if data.compat is not None:
        charts["compat_matrix"] = compat_section.matrix_chart(data.compat)
    return charts


def _margin(data: ReportData) -> float:
    """The run's margin: the speedup mart's, else the manifest's."""
    return run_margin(data.speedup.dicts(), data.manifest.margin)


def _forest(data: ReportData, charts: dict[str, dict]) -> str:
    """The forest plot and the rule in one paragraph; the details in the data dictionary."""
    details = 'Details: <a href="#data-dictionary">data dictionary</a>.'
    if not data.has_replay:
        return ""
    return forest_html("forest" in charts, _margin(data), details, data.manifest.design == "sequential")


def _dictionary(data: ReportData) -> str:
    """The terms of the verdict and its plot in full (the paragraph under the plot is short)."""
    if not data.has_replay:
        return ""
    margin = f"{_margin(data):g}"
    return (
        '<h2 id="data-dictionary">Data dictionary</h2>'
        + _defs("speedup", "intervals", "label")
        + f"<ul><li><b>margin</b>: {esc(margin)} in this run: the practical margin delta declared before the "
        "run (--margin; the speedup mart's margin column), equivalence band [1 / (1 + delta), 1 + delta]</li>"
        "<li><b>repeats, pairs</b>: the repeats and the request pairs (same prompt, level and repeat in both "
        "arms) a row's speedup and interval are computed from</li></ul>"
        "<p>Every column of every mart: <code>docs/data-dictionary.md</code> (<code>specdec analytics docs</code>)."
        "</p>"
    )


def _tab(t: Table, **kw) -> str:
    return table(t.columns, t.rows, **kw)


def _anchored(t: Table, name: str, *key: str) -> str:
    """A mart's table whose rows carry the ids the verdict links to."""
    ids = [row_anchor(name, *(r[k] for k in key)) for r in t.dicts()]
    return table(t.columns, t.rows, table_id=row_anchor(name), row_ids=ids)


def _defs(*keys: str) -> str:
    return "<ul>" + "".join(f"<li><b>{esc(k)}</b>: {esc(DEFINITIONS[k])}</li>" for k in keys) + "</ul>"


def _sentence(s: Sentence) -> str:
    return "".join(f'<a href="#{esc(p.anchor)}">{esc(p.text)}</a>' if p.anchor else esc(p.text) for p in s.parts)


def _verdict(data: ReportData) -> str:
    if not data.verdict:
        return ""
    items = "".join(f"<li>{_sentence(s)}</li>" for s in data.verdict)
    return (
        f'<h2 id="verdict">Verdict</h2><ul>{items}</ul><p>The rule: under the plot at the top; in full, with '
        'how the intervals are computed, in the <a href="#data-dictionary">data dictionary</a>.</p>'
    )


def _lossless(data: ReportData) -> list[tuple[str, str]]:
    """The classified lossless check, when the database has its marts."""
    out = []
    if data.lossless is not None:
        out.append(
            (
                "Lossless: greedy token identity, classified (lossless pass)",
                "<p>Per category and level: greedy pairs (speculative vs baseline, token ids), identical, "
                "near_tie (first divergence where the baseline's top-1 minus top-2 logprob margin is below "
                "near_tie_threshold: numerics), suspect (a divergence with a larger margin), beside the A/A "
                "floor (baseline vs baseline at the same level) and across levels (batch shape).</p>"
                + _anchored(data.lossless, "lossless", "category", "level"),
            )
        )
    if data.lossless_divergences is not None:
        out.append(
            (
                "Lossless: every non-identical greedy pair",
                _tab(data.lossless_divergences, table_id=row_anchor("lossless_divergences")),
            )
        )
    if data.sampling is not None:
        out.append(
            (
                "Lossless under sampling: same output distribution? (sampling pass)",
                f"<p>{esc(SAMPLING_METHOD)}</p>" + _tab(data.sampling, table_id=row_anchor("sampling")),
            )
        )
    return out


def _natural_end_speedup(data: ReportData) -> list[tuple[str, str]]:
    """The speedup split at the natural end (mart speedup_natural_end), when the
    report data carries it and it has rows."""
    t = data.speedup_natural_end
    if t is None or not t.rows:
        return []
    return [
        (
            "Speedup before and after the natural end (greedy pairs)",
            "<p>With ignore_eos the model runs past where it would have stopped (the natural end: the "
            "baseline lossless pass's first end-of-sequence position), often into repetitive text that drafts "
            "predict well. Per segment: geometric mean over greedy pairs of baseline / speculative time in "
            "the segment; before = send to the first streamed chunk that reaches the natural end (from the "
            "server's per-chunk token counts, exact to one chunk), after = from there to the end of the "
            "stream. A prompt that never ended counts whole as before (pairs_never_ended); pairs that cannot "
            "be split are listed as unknown with their reason. ci_low/ci_high and label as in the speedup table "
            "(the same noise pool; the A/A floor of whole requests at that category and level).</p>"
            + _tab(t, table_id=row_anchor("speedup_natural_end")),
        )
    ]


WEIGHTED_COLUMNS = (
    "category",
    "level",
    "speedup",
    "ci_low",
    "ci_high",
    "speedup_unweighted",
    "speedup_geomean",
    "speedup_covered",
    "share",
    "share_used",
    "run_share",
    "baseline_time_share",
    "saved_fraction",
    "pairs",
    "baseline_e2e_ms_mean",
    "speculative_e2e_ms_mean",
    "covered_share",
    "note",
    "excluded_reason",
)


def _traffic_charts(data: ReportData) -> str:
    """The traffic charts as page elements (``_traffic_chart_specs``)."""
    return "".join(
        f"<div id=\"{k}\"></div><script>vegaEmbed('#{k}', {script_json(v)}, {{actions: false}});</script>"
        for k, v in _traffic_chart_specs(data).items()
    )


def _traffic_chart_specs(data: ReportData) -> dict[str, dict]:
    """The traffic's category shares (and the --mix shares when given) and, when
    its rows have arrival times, its arrival-rate curve, from the manifest."""
    import altair as alt  # heavy: altair, imported only when used

    traffic, m = data.manifest.traffic or {}, data.manifest
    recorded = traffic.get("category_shares")
    shares = [
        {"category": c, "share": v, "weights": "traffic file"}
        for c, v in (recorded.items() if isinstance(recorded, dict) else ())
    ]
    shares += [{"category": c, "share": v, "weights": "given --mix"} for c, v in (m.mix or {}).items()]
    charts = {}
    if shares:
        charts["traffic_shares"] = (
            alt.Chart(alt.Data(values=shares))
            .mark_bar()
            .encode(
                x=alt.X("share:Q", title="share of requests", scale=alt.Scale(domain=[0, 1])),
                y=alt.Y("category:N", title=None),
                yOffset="weights:N",
                color="weights:N",
                tooltip=["category:N", "weights:N", alt.Tooltip("share:Q", format=".1%")],
            )
            .properties(width=420, title="Category shares")
            .to_dict()
        )
    curve = traffic.get("arrival_rate") or {}
    try:  # written by replay (traffic_profile.manifest_traffic); anything else is left undrawn
        points = [
            {"t_s": curve["start_s"] + i * curve["bin_s"], "requests_per_s": float(r)}
            for i, r in enumerate(curve["requests_per_s"])
        ]
        title = (
            f"Arrival rate of the traffic ({curve['bin_s']:g} s bins, {int(curve['known'])} of "
            f"{int(curve['of'])} rows timed)"
        )
    except (TypeError, ValueError, KeyError):
        points = []
    if points:
        charts["traffic_arrival"] = (
            alt.Chart(alt.Data(values=points))
            .mark_line(interpolate="step-after")
            .encode(
                x=alt.X("t_s:Q", title="time from the start of the recording (s)"),
                y=alt.Y("requests_per_s:Q", title="requests/s"),
            )
            .properties(width=520, height=200, title=title)
            .to_dict()
        )
    return charts


def chart_specs(data: ReportData) -> dict[str, dict]:
    """Every chart of the report by its element id (the same specs the page embeds)."""
    return {**_charts(data), **(_traffic_chart_specs(data) if data.has_replay else {})}


def _weighted_speedup(data: ReportData) -> list[tuple[str, str]]:
    """The speedup weighted by the service's category shares (mart
    speedup_weighted) with each category's contribution, and the traffic's
    shares and arrival-rate curve."""
    t, charts = data.speedup_weighted, _traffic_charts(data)
    if t is None and not charts:
        return []
    source = next((r["weights_source"] for r in t.dicts() if r["weights_source"]), None) if t is not None else None
    text = (
        "<p>How much faster the service is with its own mix of categories (weights: "
        f"{esc(source or 'none recorded')}). '(weighted)' rows: speedup = sum of share x baseline mean e2e / "
        "sum of share x speculative mean e2e, the ratio of the mix's mean request times (at a fixed "
        "concurrency also its throughput ratio); speedup_unweighted = geometric mean of every pair of the "
        "level (the run's own mix, run_share); speedup_geomean = the weighted geometric mean of the "
        "categories' figures. Category rows: speedup = baseline / speculative mean e2e of the category's "
        "pairs, saved_fraction = its share of the mix's baseline time saved (the categories' sum is "
        "1 - 1 / speedup). A category with a share but no figure makes the weighted speedup n/a "
        "(excluded_reason names it); speedup_covered renormalises over the others. The per-category times "
        "were measured in this run's mix. ci_low/ci_high ((weighted) rows): the 95% measurement interval, a t interval "
        "over the per-repeat weighted figures with the run's pooled block noise, as in the speedup table. Re-weight what is sent with "
        "<code>specdec traffic mix</code>.</p>"
    )
    table_html = _tab(t.pick(*WEIGHTED_COLUMNS), table_id=row_anchor("speedup_weighted")) if t is not None else ""
    return [("Speedup weighted by the traffic's category shares", text + charts + table_html)]


REQUEST_ACCEPTANCE_COLUMNS = (
    "level",
    "category",
    "requests_with_stats",
    "tokens_proposed",
    "tokens_accepted",
    "acceptance_rate",
    "acceptance_rate_per_request",
    "engine_proposed",
    "engine_accepted",
    "diff_proposed",
    "diff_accepted",
)


def _sections(data: ReportData) -> list[tuple[str, str]]:
    m = data.manifest
    out = []
    if data.stability is not None:
        out.append(("Stability: fault -> outcome", _tab(data.stability)))
    if data.compat is not None:
        out.append((compat_section.TITLE, compat_section.section_html(data.compat)))
    if not data.has_replay:
        return out + [("Run manifest", f"<pre>{esc(m.model_dump_json(indent=2))}</pre>")]
    if data.acceptance.rows or data.acceptance_requests is None:
        out.append(
            ("Acceptance (speculative arm)", _defs("mean_acceptance_length", "acceptance_rate") + _tab(data.acceptance))
        )
    else:  # no per-round data (an engine without the capture plugin): the per-request figures instead
        out.append(
            (
                "Acceptance (speculative arm)",
                "<p>No per-round data for this engine: acceptance by round "
                "(length, by context) cannot be computed. Per-request stats below, and per draft position "
                "from the engine's counter.</p>",
            )
        )
    if data.acceptance_requests is not None:
        out.append(
            (
                "Acceptance from the engine's per-request stats (speculative arm)",
                _defs("acceptance_requests") + _tab(data.acceptance_requests.pick(*REQUEST_ACCEPTANCE_COLUMNS)),
            )
        )
    out.append(
        (
            "Speedup",
            _defs("speedup", "intervals", "aa", "label")
            + _anchored(data.speedup.pick(*SPEEDUP_COLUMNS), "speedup", "category", "level"),
        )
    )
    out.append(("Knee: where the gain ends", _defs("knee") + _anchored(data.knee, "knee", "category")))
    out += _natural_end_speedup(data)
    out += _weighted_speedup(data)
    if data.acceptance_definitions is not None:
        out.append(
            (
                "Acceptance under the field's definitions (speculative arm)",
                _defs("acceptance_definitions") + _tab(data.acceptance_definitions),
            )
        )
    if data.acceptance_positions is not None:
        out.append(
            (
                "Acceptance by draft position (speculative arm)",
                _defs("acceptance_positions") + _tab(data.acceptance_positions),
            )
        )
    if data.acceptance_positions_engine is not None:
        out.append(
            (
                "Acceptance by draft position, from the engine's counter (speculative arm)",
                _defs("acceptance_positions_engine") + _tab(data.acceptance_positions_engine),
            )
        )
    if data.acceptance_by_context is not None:
        out.append(
            (
                "Acceptance by context length (speculative arm)",
                _defs("acceptance_by_context") + _tab(data.acceptance_by_context),
            )
        )
    out.append(
        (
            "Latency",
            f"<p>tpot_ms: {esc(DEFINITIONS['tpot_ms'])}; itl_chunk_gap_ms: "
            f"{esc(DEFINITIONS['itl_chunk_gap_ms'])}; successful requests only.</p>" + _tab(data.latency),
        )
    )
    if data.by_input_length is not None:
        out.append(
            ("Speedup and latency by input length", _defs("speedup_by_input_length") + _tab(data.by_input_length))
        )
    out.append(("Throughput (successful requests, repeats pooled)", _tab(data.throughput)))
    if data.resource_cost is not None:
        out.append(
            (
                "Resource cost: server memory and KV cache per arm and level",
                _defs("resource_cost") + _tab(data.resource_cost),
            )
        )
    if data.capacity is not None:
        slo = data.capacity.dicts()[0]
        out.append(
            (
                f"Capacity under an SLO (p95 TTFT <= {slo['slo_ttft_p95_ms']:g} ms, p95 TPOT <= "
                f"{slo['slo_tpot_p95_ms']:g} ms; {slo['slo_source']})",
                _defs("capacity_under_slo") + _tab(data.capacity, table_id=row_anchor("capacity_under_slo")),
            )
        )
    out.append(
        ("Blocks: throughput and prefix cache per arm, level and repeat", _defs("prefix_cache") + _tab(data.blocks))
    )
    out.append(("Engine step timing (captured)", _tab(data.step_timing)))
    out += _lossless(data)
    out.append(
        (
            "Timed-pass text identity (no margins)",
            "<p>Byte-identical output text of the timed greedy requests, same prompt, level and repeat in "
            "both arms, successful pairs only. No logprobs, so no divergence is classified here (see the "
            "lossless section when the run has a lossless pass); reduced precision (bfloat16) and batch "
            "shape can change greedy outputs on their own.</p>" + _tab(data.output_equality),
        )
    )
    if data.capture_note:
        recon = banner("warn", data.capture_note) + _tab(data.reconciliation, css_class="flagged")
        title = "Reconciliation: captured rows vs vLLM counters (flagged: no rounds captured)"
    else:
        recon, title = _tab(data.reconciliation), "Reconciliation: captured rows vs vLLM counters"
    out.append((title, recon))
    out.append(("Run manifest", f"<pre>{esc(m.model_dump_json(indent=2))}</pre>"))
    return out


def _run_line(data: ReportData) -> str:
    """What ran: an A/B replay names the one difference between its arms; a
    stability run names the server it probed."""
    m = data.manifest
    what = f"Model <code>{esc(m.model)}</code>, dtype {esc(m.dtype)}, engine {esc(json.dumps(m.engine))}"
    if m.kind == "stability":
        target = ", ".join(a.endpoint for a in m.arms)
        return f"Stability run. {what}; server probed: <code>{esc(target)}</code>. Run finished: {esc(m.finished)}."
    if m.kind == "compat":
        target = ", ".join(f"{a.name} {a.endpoint}" for a in m.arms)
        return (
            f"Compatibility run. {what}; servers probed: <code>{esc(target)}</code>. Run finished: {esc(m.finished)}."
        )
    arms = f"arm {esc(data.comparison[0])} against {esc(data.comparison[1])}; they" if data.comparison else "arms"
    return (
        f"{what}; {arms} differ only in: <code>{esc('; '.join(data.arm_difference))}</code>. "
        f"Run finished: {esc(m.finished)}. Requests: {data.requests_total}, failed: {data.requests_failed}."
    )


def render_html(data: ReportData) -> str:
    m = data.manifest
    charts = _charts(data)
    notices = "".join(banner(n.kind, n.text) for n in data.notices) + _forest(data, charts)
    if data.levels.rows:
        notices += (
            f"<h2>Requests and failures per arm and level</h2><p>error_rate: {esc(DEFINITIONS['error_rate'])} "
            f"(max_error_rate {esc(m.max_error_rate)}).</p>" + _tab(data.levels)
        )
    body = "".join(f"<h2>{esc(t)}</h2>{c}" for t, c in _sections(data)) + _dictionary(data)
    others = {k: v for k, v in charts.items() if k != "forest"}  # the forest's <div> opens the page
    title = f"specdec report: run {m.run_id}" + (
        f", {data.comparison[0]} against {data.comparison[1]}" if data.comparison else ""
    )
    return page(title, charts, f"{notices}\n<p>{_run_line(data)}</p>\n{_verdict(data)}\n{chart_divs(others)}\n{body}")


def write_chart_pngs(data: ReportData, run_dir: Path, prefix: str = "") -> list[Path]:
    """Each chart of the report as a PNG beside it (``runfolder.chart_png``, the chart's
    name after ``prefix``), rendered by vl-convert from the same Vega-Lite spec the page embeds."""
    return write_pngs(chart_specs(data), run_dir, prefix)


def write_pngs(specs: dict[str, dict], run_dir: Path, prefix: str = "") -> list[Path]:
    """Vega-Lite specs as PNGs under the run folder's charts/ (``runfolder.chart_png``)."""
    import vl_convert  # heavy: vl-convert, imported only when used
    from altair.utils._importers import vl_version_for_vl_convert  # heavy: altair, imported only when used

    out = []
    for name, spec in specs.items():
        path = chart_png(run_dir, prefix + name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            path, vl_convert.vegalite_to_png(chart_safe(spec), vl_version=vl_version_for_vl_convert(), scale=2)
        )
        out.append(path)
    return out


def write_report(run_dir: Path, slo=None, progress=None) -> tuple[Path, str]:
    """Rebuild the marts (``slo``: the capacity_under_slo mart's SLO, ``analytics/settings.py``;
    ``progress``: the build's, ``build``),
    write ``report.html`` atomically and each chart as a PNG, return the report and the summary.
    A report is of one run: a folder whose database holds several is refused, the runs named
    (``report_data.report_run``)."""

    import duckdb  # heavy: duckdb, imported only when used

    run_dir = Path(run_dir)
    db = build(run_dir, slo=slo, progress=progress)
    con = duckdb.connect(str(db), read_only=True)
    try:
        sources = [r[0] for r in con.execute("select distinct source_run_id from stg_manifest").fetchall()]
        comps = side_by_side.comparisons_in(con, sources[0]) if len(sources) == 1 else []
        if comps:
            return _write_side_by_side(con, run_dir, sources[0], comps)
        data = load_report(con)
    finally:
        con.close()
    out = run_dir / REPORT
    atomic_write_bytes(out, render_html(data).encode("utf-8", "backslashreplace"))
    write_chart_pngs(data, run_dir)
    return out, summary_text(data)


def _write_side_by_side(con, run_dir: Path, run_id: str, comps) -> tuple[Path, str]:
    """A run of named arms (``side_by_side.py``): each comparison's full report as
    ``report-<arm>.html`` (its charts prefixed with the arm), and ``report.html`` with the
    comparisons side by side; the summary is the side-by-side table, then each comparison's."""
    summaries, notes, manifest = [], [], None
    for c in comps:
        data = load_report(con, c.analysis_run_id)
        manifest = data.manifest
        notes += [f"{c.arm}: {n.text}" for n in data.notices if n.kind == "alarm"]
        atomic_write_bytes(run_dir / c.report_name, render_html(data).encode("utf-8", "backslashreplace"))
        write_chart_pngs(data, run_dir, prefix=f"{c.arm}-")
        summaries.append(
            f"--- {c.arm} ({c.engine}) against {c.reference} ({c.reference_engine}) ---\n" + summary_text(data)
        )
    t = side_by_side.side_by_side(con, run_id)
    out = run_dir / REPORT
    atomic_write_bytes(
        out, side_by_side.render_side_by_side(run_id, manifest, comps, t, notes).encode("utf-8", "backslashreplace")
    )
    write_pngs(side_by_side.chart_specs(t), run_dir)
    return out, "\n".join(side_by_side.summary_lines(run_id, comps, t) + summaries)


def failed_levels(run_dir: Path) -> list[str]:
    """Arm and level of every level the marts mark failed (``level_health``);
    reads the database ``write_report`` or ``build`` left in the run folder."""
    import duckdb  # heavy: duckdb, imported only when used

    con = duckdb.connect(str(Path(run_dir) / DB_NAME), read_only=True)
    try:
        rows = con.execute("select arm, level from level_health where level_failed order by arm, level").fetchall()
    finally:
        con.close()
    return [f"{arm} c{level}" for arm, level in rows]
