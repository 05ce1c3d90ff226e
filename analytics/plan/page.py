"""``PLAN_DIR/plan.html``, one story (issue 42, item 2): "What to deploy" first (the pools and
the k per load band, the deployed policy's predicted traffic-weighted gain with its interval, whether
it is validated and why not, the routing with each category's k per band, the vLLM schedule, the
llama.cpp flags); then the per-cell table that explains it (each (category, band)'s deployed k,
the cell's own decision by the rule and why they differ); then the decision rule and the policies
compared, the predicted speedup per k (a chart), the checks, the step-cost fits, the acceptance
the model uses, and the assumptions. Both the deployed settings and the table read the one
``decide()`` (recommend.py): the policy's k per band and each cell's ``deployed_k``.
Self-contained, through the report's page shell; every string escaped (``report/html.py``).
"""

from __future__ import annotations

from specdec.analytics.report.chart_text import chart_safe
from specdec.analytics.report.html import banner, esc, table
from specdec.analytics.report.page import chart_divs, page

__all__ = ["render"]


def _pm(d: dict, key: str = "speedup") -> str:
    return f"{d[key]:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def _check(ins: dict, title: str) -> str:
    if not ins["cells"]:
        return f"<h2>{esc(title)}</h2><p>" + esc(ins["what"]) + " (no cell to compare).</p>"
    per_cat = "; ".join(
        f"{cat}: {_num(v['median_absolute_relative_error'])} error, {_num(v['coverage'])} covered"
        for cat, v in ins["by_category"].items()
    )
    return (
        f"<h2>{esc(title)}</h2><p>"
        + esc(ins["what"])
        + f". Median absolute relative error {_num(ins['median_absolute_relative_error'])}, "
        f"measured speedup inside the predicted interval in {_num(ins['coverage'])} of the cells "
        f"({esc(per_cat)}).</p>"
        + table(
            [
                "category",
                "band",
                "k",
                "predicted [prediction interval]",
                "expected speedup's interval",
                "measured",
                "measured 95% interval",
                "relative error",
                "covered",
            ],
            [
                [
                    r["category"],
                    f"c{r['level']}",
                    r["k"],
                    f"{r['predicted']:.3f} [{_num(r['predicted_low'])}, {_num(r['predicted_high'])}]",
                    f"[{_num(r['expected_low'])}, {_num(r['expected_high'])}]",
                    r["measured"],
                    None if r["measured_low"] is None else f"[{r['measured_low']:.3f}, {r['measured_high']:.3f}]",
                    r["relative_error"],
                    r["covered"],
                ]
                for r in ins["cells"]
            ],
        )
    )


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _chart(plan: dict) -> dict:
    import altair as alt  # heavy: only when a page is written

    rows = [
        {
            "category": c["category"],
            "level": f"c{c['level']}",
            "k": b["k"],
            **{x: b[x] for x in ("speedup", "low", "high")},
        }
        for c in plan["cells"]
        for b in c["by_k"]
    ]
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("k:O", title="draft tokens k (0 = off)"), color=alt.Color("category:N")
    )
    chart = (
        alt.layer(
            base.mark_line(point=True).encode(y=alt.Y("speedup:Q", title="predicted speedup vs k = 0")),
            base.mark_errorbar().encode(y="low:Q", y2="high:Q"),
        )
        .properties(width=260, height=200)
        .facet(column=alt.Column("level:N", title="load band (concurrency)"))
    )
    return chart_safe(chart.to_dict())


def _validation(plan: dict) -> str:
    """Whether the plan is validated, and why not: a replay that passed, failed or could not
    compare anything (an alarm), or none made (predicted only)."""
    text = plan["validation"]
    if plan["validated"]:
        return f"<p><b>Validated by replay:</b> {esc(text)}.</p>"
    if text.startswith("failed"):
        return banner("alarm", f"Not validated: the replay {text}.")
    if text.startswith("not validated against"):
        return banner("alarm", f"N{text[1:]}.")
    return banner(
        "warn",
        f"Not validated by replay: predicted by the model over one capture (k = {plan['captured_k']}); a plan is "
        f"validated only by replaying its settings {text.removeprefix('not validated by replay').strip()}.",
    )


def _k(k: int) -> str:
    return "off" if k == 0 else str(k)


def _deploy(plan: dict) -> str:
    """What to deploy: the pools and the k per band, the traffic-weighted gain with its interval,
    whether validated, then each engine's settings and the routing (one table)."""
    deployed = next(p for p in plan["policies"] if p["name"] == "k_per_band_with_fallback")
    pools = plan["exports"]["routing"]["pools"]
    spec = [c for c, pool in sorted(pools.items()) if pool == "speculative"]
    plain = [c for c, pool in sorted(pools.items()) if pool != "speculative"]
    per_band = ", ".join(f"c{b['level']}: {_k(max((b['k'][c] for c in spec), default=0))}" for b in deployed["bands"])
    what = (
        f"the speculative pool for {', '.join(spec)} (k per load band: {per_band})" if spec else "no speculation"
    ) + (f"; the plain pool (speculation off) for {', '.join(plain)}" if plain and spec else "")
    conf = int(plan["confidence"] * 100)
    gains = "; ".join(f"c{b['level']} {_pm(b, 'gain')}" for b in deployed["bands"])
    settings = table(
        ["category", "pool"] + [f"k at band c{b['level']}" for b in deployed["bands"]],
        [[cat, pools.get(cat, "plain")] + [_k(b["k"][cat]) for b in deployed["bands"]] for cat in sorted(pools)],
        table_id="deploy-settings",
    )
    return (
        '<h2 id="what-to-deploy">What to deploy</h2>'
        + f"<p><b>Deploy</b> {esc(what)}.</p>"
        + f'<p id="deploy-gain"><b>Predicted traffic-weighted gain</b> against speculation off: '
        f"{_pm(deployed['overall'], 'gain')} ({conf}% bootstrap interval; categories weighed by output-token "
        f"share, load bands equally). Per band: {esc(gains)}.</p>"
        + _validation(plan)
        + "".join(banner("warn", f"The capture: {w}.") for w in plan.get("warnings", []))
        + "<h3>Routing and k per category and load band</h3>"
        + settings
        + "".join(_engine_settings(e) for e in plan["exports"]["engines"].values())
    )


def _engine_settings(export: dict) -> str:
    """One engine's form of the plan (``Engine.deployment``): its k per batch-size range where the
    engine takes a schedule, the command-line settings to serve the speculative pool with, a note."""
    anchor = export["engine"].replace(".", "-")
    schedule = (
        table(
            ["batch sizes", "k"],
            [[f"{a}-{b}", _k(k)] for a, b, k in export["schedule"]],
            table_id=f"{anchor}-schedule",
        )
        if export["schedule"] is not None
        else ""
    )
    return (
        f"<h3>{esc(export['label'])} (speculative pool)</h3>"
        + schedule
        + f'<pre id="{anchor}-settings">'
        + esc(export["command"] or "(no speculation settings: speculation off)")
        + f"</pre><p>{esc(export['note'])}</p>"
    )


def _cells(plan: dict) -> str:
    """The per-cell table: the setting deployed for each (category, band) and why."""
    return (
        '<h2 id="why">Why: per category and load band</h2><p>Each cell\'s deployed k (the table above), its '
        "predicted speedup, and why: the cell's own decision by the rule below, and, where the deployed k differs, "
        "the reason (the band's one k for the speculative pool, or the plain pool). The predicted speedup's interval "
        "is the bootstrap's, for the expected speedup; the prediction interval is where a replay's measured speedup "
        "(the planned run's repeats) should fall, with the run-to-run noise estimated from this run's repeats.</p>"
        + table(
            [
                "category",
                "band",
                "deployed k",
                "deployed: predicted speedup",
                "why deployed",
                "the cell's own decision k",
                "why (the rule)",
                "its predicted speedup",
                "a replay's measurement: prediction interval",
                "eligible k",
                "runner-up k (speedup)",
                "SLO excluded k > 0",
            ],
            [
                [
                    c["category"],
                    f"c{c['level']}",
                    _k(c["deployed_k"]),
                    f"{c['deployed_speedup']:.3f} [{c['deployed_low']:.3f}, {c['deployed_high']:.3f}]",
                    c["deployed_note"] or "the cell's own decision",
                    _k(c["recommended_k"]),
                    c["decision"],
                    _pm(c),
                    "n/a (no noise estimate)"
                    if c["prediction_low"] is None
                    else f"[{c['prediction_low']:.3f}, {c['prediction_high']:.3f}]",
                    ", ".join(map(str, c["eligible_ks"])) or "none",
                    None
                    if c["runner_up_k"] is None
                    else f"{c['runner_up_k']} ({c['runner_up_speedup']:.3f} [{c['runner_up_low']:.3f}, "
                    f"{c['runner_up_high']:.3f}])",
                    c["slo_excluded_speculation"],
                ]
                for c in plan["cells"]
            ],
            table_id="cells",
        )
    )


def _policies(plan: dict) -> str:
    """The decision rule, and the policies compared by it."""
    conf = int(plan["confidence"] * 100)
    rows = [
        [p["name"], p["description"], _pm(p["overall"], "gain")]
        + [f"{', '.join(f'{c}={k}' for c, k in b['k'].items())}: {_pm(b, 'gain')}" for b in p["bands"]]
        for p in plan["policies"]
    ]
    return (
        '<h2 id="rule">The decision rule</h2><p>'
        + esc(plan["decision_rule"]["text"])
        + "</p><h3>The policies compared</h3><p>Traffic-weighted gain (tokens/s against speculation off) of each "
        f"policy, overall and per load band, {conf}% bootstrap interval in brackets; each policy's k chosen by the "
        "rule above on its own gain. The deployed one is k_per_band_with_fallback.</p>"
        + table(["policy", "what", "overall gain"] + [f"band c{lv}" for lv in plan["levels"]], rows)
    )


def render(plan: dict) -> str:
    charts = {"plan_speedup": _chart(plan)}
    fits = table(
        ["fit", "term", "coefficient [ms]", "std error", "fitted", "steps", "rmse [ms]", "relative rmse"],
        [
            [name, term, t["coef"], t["std_error"], t["fitted"], f["steps"], f["rmse_ms"], f["relative_rmse"]]
            for name, f in (("verify", plan["model"]["verify_fit"]), ("draft", plan["model"]["draft_fit"]))
            for term, t in f["terms"].items()
        ],
    )
    acc = table(
        ["category", "k", "tokens per step (tau)", "drafts per step (dbar)", "requests", "decode rounds"],
        [
            [a["category"], a["k"], a["tokens_per_step"], a["drafts_per_step"], a["requests"], a["decode_rounds"]]
            for a in plan["model"]["acceptance"]
        ],
    )
    checks = _check(plan["in_sample_check"], "In-sample check (not a validation)") + _check(
        plan["cross_k_check"], "Across k: predicted from one capture, measured at another k"
    )
    body = (
        _deploy(plan)
        + _cells(plan)
        + _policies(plan)
        + "<h2>Predicted speedup per k</h2>"
        + chart_divs(charts)
        + checks
        + "<h2>Step cost fits</h2>"
        + fits
        + "<h2>Acceptance used</h2>"
        + acc
        + "<h3>By context-length bucket (reported, not used by the model)</h3>"
        + table(
            ["category", "context from [tokens]", "decode rounds"] + [f"tau(k={k})" for k in plan["ks"]],
            [
                [r["category"], r["context_low"], r["decode_rounds"]]
                + [r["tokens_per_step"][str(k)] for k in plan["ks"]]
                for r in plan["model"]["acceptance_by_context"]
            ],
        )
        + "<h2>Model and assumptions</h2><pre>"
        + esc(plan["model"]["formulas"])
        + "</pre><ul>"
        + "".join(f"<li>{esc(a)}</li>" for a in plan["model"]["assumptions"] + plan["notes"])
        + "</ul>"
    )
    return page(f"specdec plan: {plan['run_id']}", charts, body)
