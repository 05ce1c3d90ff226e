"""The report of a run of named arms (``specdec.arms``): its comparisons side by side.

A run of named arms is analysed as one analysis run per comparison,
``<run_id>/<treatment arm>`` (``stg_manifest``). ``write_report`` writes the
full report of each comparison as ``report-<arm>.html`` (charts under
``charts/<arm>-<chart>.png``) and, as ``report.html``, this page: per
comparison (treatment arm against its reference, each with its engine), per
category and level,

- the speedup mart's figure, the family-wise interval its label reads, and the label (the same
  definitions as each comparison's own report: geometric mean of paired e2e
  ratios, reference / treatment), and
- acceptance, from each engine's per-request stats (``acceptance_requests``:
  tokens accepted / drafted, pooled per category and level), which both
  engines report, with the mean acceptance length per round where rounds were
  captured (``acceptance``, pooled over levels; vLLM only: llama.cpp has no
  per-round data, and the cell says so).

Nothing is pooled across comparisons: each row is one comparison's figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from specdec.analytics.labels import DEFAULT_MARGIN
from specdec.analytics.report.chart_text import chart_safe
from specdec.analytics.report.data import Table
from specdec.analytics.report.forest import forest_chart, forest_html, forest_rows, run_margin
from specdec.analytics.report.html import banner, esc, table
from specdec.analytics.report.page import chart_divs, page
from specdec.analytics.report.summary import text_table
from specdec.engines import ENGINES

__all__ = ["Comparison", "comparisons_in", "side_by_side", "render_side_by_side", "summary_lines"]

#: The comparisons of one run folder's run ($source), with each side's engine.
_COMPARISONS = """
    select m.run_id, m.treatment_arm, m.reference_arm, t.engine as treatment_engine, r.engine as reference_engine
    from stg_manifest m
    join raw_arm_roles t on t.analysis_run_id = m.run_id and t.role = 'speculative'
    join raw_arm_roles r on r.analysis_run_id = m.run_id and r.role = 'baseline'
    where m.source_run_id = $source and m.treatment_arm is not null
"""

_SQL = f"""
    with c as ({_COMPARISONS}),
    req as (
        select run_id, category, level, acceptance_rate, requests_with_stats, tokens_proposed
        from acceptance_requests where arm = 'speculative'
    ),
    rounds as (
        select run_id, category, mean_acceptance_length, acceptance_rate
        from acceptance where arm = 'speculative'
    )
    select c.treatment_arm as arm, c.treatment_engine as engine, c.reference_arm as reference,
           s.category, s.level, s.speedup, s.ci_low, s.ci_high, s.label,
           s.ci_level, s.margin, s.repeats, s.pairs, s.excluded_reason,
           req.acceptance_rate as acceptance_rate_requests, req.requests_with_stats,
           req.tokens_proposed as tokens_proposed_requests,
           rounds.mean_acceptance_length as acceptance_length_rounds,
           rounds.acceptance_rate as acceptance_rate_rounds, c.run_id as analysis_run_id
    from c
    join speedup s on s.run_id = c.run_id
    left join req on req.run_id = c.run_id and req.level = s.level
     and req.category = case when s.category = '(system)' then '(all)' else s.category end
    left join rounds on rounds.run_id = c.run_id and rounds.category = s.category
    order by s.category = '(system)', s.category, s.level, c.treatment_arm
"""


@dataclass(frozen=True)
class Comparison:
    analysis_run_id: str
    arm: str
    reference: str
    engine: str
    reference_engine: str

    @property
    def report_name(self) -> str:
        return f"report-{self.arm}.html"


def comparisons_in(con, source_run_id: str) -> list[Comparison]:
    """The comparisons of one run folder's run (none for a classic run)."""
    rows = con.execute(f"select * from ({_COMPARISONS}) order by run_id", {"source": source_run_id}).fetchall()
    return [Comparison(*r) for r in rows]


def side_by_side(con, source_run_id: str) -> Table:
    """One row per comparison, category and level (module docstring)."""
    cur = con.execute(_SQL, {"source": source_run_id})
    return Table(tuple(d[0] for d in cur.description), tuple(tuple(r) for r in cur.fetchall()))


def _chart(t: Table) -> dict | None:
    import altair as alt  # heavy: altair, imported only when used

    rows = [
        {k: r[k] for k in ("arm", "engine", "category", "level", "speedup", "ci_low", "ci_high", "label")}
        for r in t.dicts()
        if r["speedup"] is not None
    ]
    if not rows:
        return None
    levels = sorted({r["level"] for r in rows})
    domain = [levels[0], levels[-1]] if len(levels) > 1 else [levels[0] / 2, levels[0] * 2]
    x = alt.X(
        "level:Q",
        scale=alt.Scale(type="log", base=2, domain=domain, nice=False),
        axis=alt.Axis(values=levels, format="d"),
        title="concurrent requests",
    )
    base = alt.Chart().encode(
        x=x,
        color=alt.Color("arm:N", title="comparison (treatment arm)"),
        tooltip=[
            "arm:N",
            "engine:N",
            "category:N",
            "level:Q",
            alt.Tooltip("speedup:Q", format=".2f"),
            alt.Tooltip("ci_low:Q", format=".2f"),
            alt.Tooltip("ci_high:Q", format=".2f"),
            "label:N",
        ],
    )
    line = base.mark_line(point=True).encode(y=alt.Y("speedup:Q", title="speedup (reference / treatment e2e)"))
    band = base.mark_errorbar().encode(y=alt.Y("ci_low:Q", title="speedup (reference / treatment e2e)"), y2="ci_high:Q")
    one = alt.Chart().mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(1.0))  # no speedup
    return (
        alt.layer(band, line, one, data=alt.Data(values=rows))
        .properties(width=220, height=180)
        .facet(facet=alt.Facet("category:N", title=None), columns=4)
        .properties(title="Speedup per category and level, each comparison against its own reference")
        .to_dict()
    )


def chart_specs(t: Table) -> dict[str, dict]:
    """The page's charts, their labels safe for the renderer (``labels_text``): the forest
    plot of every comparison's labels first (``forest.py``), then the speedup by level."""
    forest = forest_chart(
        forest_rows(t.dicts(), group="arm"),
        run_margin(t.dicts(), DEFAULT_MARGIN),
        title="Verdict: speedup per category, level and comparison (each against its own reference)",
    )
    spec = _chart(t)
    return {k: chart_safe(v) for k, v in (("forest", forest), ("side_by_side_speedup", spec)) if v}


def _cell(v, fmt: str = "{:.2f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _arm_text(arm) -> str:
    spec = "no speculation" if arm.speculative_config is None else json.dumps(arm.speculative_config)
    return f"{arm.name} ({arm.engine or '?'}, {spec})"


def _acceptance_rate(r: dict) -> str:
    if r["tokens_proposed_requests"] == 0:
        return "nothing drafted"
    return _cell(r["acceptance_rate_requests"], "{:.3f}")


def render_side_by_side(run_id: str, manifest, comps: list[Comparison], t: Table, notes: list[str]) -> str:
    """``report.html`` of a run of named arms."""
    charts = chart_specs(t)
    others = {k: v for k, v in charts.items() if k != "forest"}  # the forest's <div> opens the page
    forest = forest_html(
        "forest" in charts,
        run_margin(t.dicts(), manifest.margin),
        "Rows name the comparison (treatment arm) last; each comparison's own report has its data dictionary.",
    )
    links = "".join(
        f'<li><a href="{esc(c.report_name)}">{esc(c.arm)}</a> ({esc(c.engine)}) against '
        f"{esc(c.reference)} ({esc(c.reference_engine)}): analysis run <code>{esc(c.analysis_run_id)}"
        f"</code></li>"
        for c in comps
    )
    rows = [
        (
            r["category"],
            r["level"],
            r["arm"],
            r["engine"],
            _cell(r["speedup"]),
            f"[{_cell(r['ci_low'])}, {_cell(r['ci_high'])}]",
            r["label"] or "",
            _acceptance_rate(r),
            _cell(r["acceptance_length_rounds"])
            if r["acceptance_length_rounds"] is not None
            else "no per-round data for this engine"
            if r["engine"] in ENGINES and not ENGINES[r["engine"]].writes_rounds
            else "-"
            if r["category"] == "(system)"
            else "n/a",
        )
        for r in t.dicts()
    ]
    head = (
        "category",
        "level",
        "comparison",
        "engine",
        "speedup",
        "interval (family-wise)",
        "label",
        "acceptance rate (per-request stats)",
        "acceptance length (rounds)",
    )
    title = f"specdec report: run {run_id}, {len(comps)} comparisons side by side"
    warn = "".join(banner("warn", n) for n in notes)
    return page(
        title,
        charts,
        f"""{warn}
{forest}
<p>Arms: {esc(", ".join(_arm_text(a) for a in manifest.arms))}.
Run finished: {esc(manifest.finished)}. Each comparison is a treatment arm measured against its own reference
arm on the same traffic, in the same run; its full report (verdict, latency, acceptance, lossless checks,
reconciliation) is linked below.</p>
<ul>{links}</ul>
{chart_divs(others)}
<h2>Per category and level</h2>
<p>speedup: the geometric mean over prompts of reference e2e / treatment e2e (paired by prompt and repeat),
with the family-wise interval its label reads (5% over the comparison's labels together) and the label, as in each
comparison's own report; (system): whole-level
throughput ratio. acceptance rate: tokens accepted / tokens drafted, from the engine's own per-request stats
(vLLM metrics.speculative_decoding, llama.cpp timings), pooled over the level's requests (on (system) rows,
over all its categories): the one acceptance figure both engines report. acceptance length: 1 + accepted / verify rounds over the captured rounds, pooled
over levels (vLLM only).</p>
{table(head, rows)}""",
    )


def summary_lines(run_id: str, comps: list[Comparison], t: Table) -> list[str]:
    lines = [
        f"run {run_id}: {len(comps)} comparisons, side by side (reports: {', '.join(c.report_name for c in comps)}):"
    ]
    lines += text_table(
        ["category", "level", "comparison", "engine", "speedup", "interval", "label", "accept rate"],
        [
            [
                r["category"],
                r["level"],
                r["arm"],
                r["engine"],
                r["speedup"],
                f"[{_cell(r['ci_low'])}, {_cell(r['ci_high'])}]",
                r["label"],
                _acceptance_rate(r),
            ]
            for r in t.dicts()
        ],
    )
    return lines
