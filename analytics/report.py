"""``specdec report RUN_DIR``: one self-contained HTML file plus a terminal summary.

The HTML inlines the Vega/Vega-Lite/vega-embed bundle shipped in
vl-convert-python, so it renders with no network. Every number comes from the
marts in ``specdec.duckdb``; every table names the definition it uses.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from specdec.analytics.build import build

DEFINITIONS = {
    "mean_acceptance_length": "per-round: 1 + sum(accepted) / verify rounds, pooled over all rounds (includes the bonus token)",
    "acceptance_rate": "per-token: sum(accepted) / sum(proposed), pooled",
    "speedup": "speculative / baseline mean per-request output tokens/s (tokens / end-to-end seconds, TTFT included); "
               "'(system)' = ratio of whole-level output tokens/s (capacity)",
    "tpot_ms": "(e2e - ttft) / (output tokens - 1), per request",
    "itl_chunk_gap_ms": "gap between streamed chunks; one chunk can carry several tokens under speculation",
}


def _rows(con, sql: str) -> tuple[list[str], list[tuple]]:
    cur = con.execute(sql)
    return [d[0] for d in cur.description], cur.fetchall()


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def _table(cols: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _charts(con) -> dict[str, dict]:
    import altair as alt

    cols, rows = _rows(con, "select category, concurrency, speedup from speedup where speedup is not null")
    speed = [dict(zip(cols, r)) for r in rows]
    cols, rows = _rows(con, "select arm, concurrency, output_tokens_per_s from throughput")
    thr = [dict(zip(cols, r)) for r in rows]
    levels = sorted({r["concurrency"] for r in thr})
    x = alt.X("concurrency:Q", scale=alt.Scale(type="log", base=2), title="concurrent requests",
              axis=alt.Axis(values=levels, format="d"))
    base = alt.Chart(alt.Data(values=speed)).encode(
        x=x,
        y=alt.Y("speedup:Q", title="speedup (speculative / baseline)"),
        color=alt.Color("category:N"),
        tooltip=["category:N", "concurrency:Q", alt.Tooltip("speedup:Q", format=".2f")],
    )
    rule = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    speedup = (base.mark_line(point=True) + rule).properties(
        width=520, height=300, title="Speedup vs concurrency, by category")

    throughput = alt.Chart(alt.Data(values=thr)).mark_line(point=True).encode(
        x=x,
        y=alt.Y("output_tokens_per_s:Q", title="output tokens/s (whole level)"),
        color="arm:N",
    ).properties(width=520, height=260, title="System throughput by arm")
    return {"speedup": speedup.to_dict(), "throughput": throughput.to_dict()}


def render_html(con, manifest: dict) -> str:
    from altair.utils._importers import vl_version_for_vl_convert
    import vl_convert

    charts = _charts(con)
    sections = []
    acc_cols, acc_rows = _rows(con, "select * from acceptance where arm = 'speculative'")
    sections.append(("Acceptance (speculative arm)", 
                     "<ul>" + "".join(f"<li><b>{k}</b>: {html.escape(DEFINITIONS[k])}</li>"
                                      for k in ("mean_acceptance_length", "acceptance_rate")) + "</ul>"
                     + _table(acc_cols, acc_rows)))
    sp_cols, sp_rows = _rows(con, "select category, concurrency, baseline_tokens_per_s, speculative_tokens_per_s, speedup from speedup")
    sections.append(("Speedup", f"<p>{html.escape(DEFINITIONS['speedup'])}</p>" + _table(sp_cols, sp_rows)))
    lat_cols, lat_rows = _rows(con, """select arm, category, concurrency, requests_ok, requests_failed,
        ttft_ms_p50, ttft_ms_p95, ttft_ms_p99, tpot_ms_p50, tpot_ms_p95, tpot_ms_p99,
        itl_chunk_gap_ms_p50, itl_chunk_gap_ms_p99, output_tokens_per_s_mean from latency""")
    sections.append(("Latency", f"<p>tpot_ms: {html.escape(DEFINITIONS['tpot_ms'])}; itl_chunk_gap_ms: "
                     f"{html.escape(DEFINITIONS['itl_chunk_gap_ms'])}</p>" + _table(lat_cols, lat_rows)))
    st_cols, st_rows = _rows(con, "select * from step_timing")
    sections.append(("Engine step timing (captured)", _table(st_cols, st_rows)))
    eq_cols, eq_rows = _rows(con, "select * from output_equality")
    sections.append(("Greedy output equality (speculative vs baseline)",
                     "<p>Byte-identical output text for the same prompt at the same level. "
                     "Reduced precision (bfloat16) and batch shape can change greedy outputs on their own.</p>"
                     + _table(eq_cols, eq_rows)))
    rc_cols, rc_rows = _rows(con, "select * from reconciliation")
    sections.append(("Reconciliation: captured rows vs vLLM counters", _table(rc_cols, rc_rows)))
    sections.append(("Run manifest", f"<pre>{html.escape(json.dumps(manifest, indent=2))}</pre>"))

    bundle = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
    body = "".join(f"<h2>{html.escape(t)}</h2>{c}" for t, c in sections)
    embeds = "\n".join(f"vegaEmbed('#{k}', {json.dumps(v)}, {{actions: false}});" for k, v in charts.items())
    title = f"specdec report: run {manifest.get('run_id')}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}
th{{background:#f3f3f3}}pre{{background:#f7f7f7;padding:1em;font-size:12px;overflow:auto}}</style>
<script>{bundle}</script></head><body>
<h1>{html.escape(title)}</h1>
<p>Model <code>{html.escape(str(manifest.get('model')))}</code>, dtype {html.escape(str(manifest.get('dtype')))},
engine {html.escape(json.dumps(manifest.get('engine')))}; arms differ only in: <code>{html.escape('; '.join(manifest.get('arm_difference', [])))}</code>.
Run finished: {manifest.get('finished')}.</p>
<div id="speedup"></div><div id="throughput"></div>
{body}
<script>{embeds}</script>
</body></html>"""


def summary_text(con, manifest: dict) -> str:
    lines = [f"run {manifest.get('run_id')}: {manifest.get('model')} ({manifest.get('dtype')}), "
             f"levels {manifest.get('concurrency_levels')}, finished={manifest.get('finished')}"]
    lines.append("speedup (speculative/baseline tokens/s; per category = mean per-request, (system) = whole level):")
    cols, rows = _rows(con, "select category, concurrency, speedup from speedup order by category, concurrency")
    by_cat: dict[str, list[str]] = {}
    for cat, conc, sp in rows:
        by_cat.setdefault(cat, []).append(f"c{conc}={_fmt(sp)}")
    for cat, vals in by_cat.items():
        lines.append(f"  {cat:<12} " + "  ".join(vals))
    lines.append("acceptance, speculative arm (length = 1 + accepted/rounds; rate = accepted/proposed; pooled):")
    for cat, length, rate in con.execute(
            "select category, mean_acceptance_length, acceptance_rate from acceptance where arm='speculative'").fetchall():
        lines.append(f"  {cat:<12} length {_fmt(length)}  rate {_fmt(rate)}")
    captured, bad = con.execute(
        "select count(*) filter (capture_present), count(*) filter (capture_present and "
        "(diff_rounds <> 0 or diff_proposed <> 0 or diff_accepted <> 0)) from reconciliation").fetchone()
    if not captured:
        lines.append("reconciliation with vLLM counters: not applicable (no captured engine rows)")
    else:
        lines.append("reconciliation with vLLM counters: " + ("exact" if bad == 0 else f"{bad} level(s) differ"))
    same, pairs = con.execute("select sum(identical), sum(pairs) from output_equality").fetchone()
    if pairs:
        lines.append(f"greedy outputs identical across arms: {same}/{pairs}")
    return "\n".join(lines)


def write_report(run_dir: Path) -> tuple[Path, str]:
    import duckdb

    run_dir = Path(run_dir)
    db = build(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    con = duckdb.connect(str(db), read_only=True)
    try:
        page = render_html(con, manifest)
        summary = summary_text(con, manifest)
    finally:
        con.close()
    out = run_dir / "report.html"
    tmp = run_dir / ".report.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out, summary
