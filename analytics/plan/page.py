"""``PLAN_DIR/plan.html``: "What to deploy" first (the decision rule, the deployed policy's
traffic-weighted gain and whether it is validated, the vLLM schedule, the llama.cpp flags, the
routing, then the policies compared), then the cells (each one's decision and why, the k the
deployed policy gives it, runner-up), the predicted speedup per k (a chart), the step-cost fits, the acceptance the
model uses, and the assumptions. Self-contained, through the report's page shell; every
string escaped (``report/html.py``).
"""

from __future__ import annotations

import json

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


def render(plan: dict) -> str:
    levels = plan["levels"]
    pols = plan["policies"]
    if plan["validated"]:
        notice = banner("warn", f"Validated by replay: {plan['validation']}.")
    else:
        notice = banner(
            "warn",
            "Predicted, not validated by replay: the figures below come from the model over one capture "
            f"(k = {plan['captured_k']}); a plan is validated only by replaying its settings. Validation: "
            f"{plan['validation']}.",
        )
    policy_rows = [
        [p["name"], p["description"], _pm(p["overall"], "gain")]
        + [f"{', '.join(f'{c}={k}' for c, k in b['k'].items())}: {_pm(b, 'gain')}" for b in p["bands"]]
        for p in pols
    ]
    vllm = plan["exports"]["vllm"]
    llama = plan["exports"]["llama_cpp"]
    routing = plan["exports"]["routing"]["pools"]
    rule = plan["decision_rule"]
    deployed = next(p for p in pols if p["name"] == "k_per_band_with_fallback")
    pool = plan["speculative_pool"]
    deploy = (
        "<h2>What to deploy</h2>"
        + notice
        + "".join(banner("warn", f"The capture: {w}.") for w in plan.get("warnings", []))
        + "<p><b>The decision rule.</b> "
        + esc(rule["text"])
        + "</p><p><b>Deploy:</b> k per load band with the plain pool (the per-cell table below says why each "
        f"category gets its k). Predicted traffic-weighted gain against speculation off: {_pm(deployed['overall'], 'gain')}"
        f" ({int(plan['confidence'] * 100)}% bootstrap interval); "
        + esc("validated by replay" if plan["validated"] else "not validated by replay")
        + ". Per band: "
        + esc(
            "; ".join(
                f"c{b['level']}: "
                + (", ".join(f"{c}={k}" for c, k in b["k"].items() if k > 0) or "off")
                + f" ({_pm(b, 'gain')})"
                for b in deployed["bands"]
            )
        )
        + ".</p><h3>vLLM (speculative pool)</h3><pre>--speculative-config "
        + esc(json.dumps(vllm["speculative_config"]))
        + "</pre><p>"
        + esc(vllm["note"])
        + "</p><h3>llama.cpp (speculative pool)</h3><pre>"
        + esc(" ".join(llama["flags"]) or "(no speculation flags: speculation off)")
        + "</pre><p>"
        + esc(pool["description"])
        + "</p><h3>Routing</h3>"
        + table(["category", "pool"], sorted(routing.items()))
        + "<h3>The policies compared</h3><p>Traffic-weighted gain (tokens/s against speculation off) of each "
        f"policy, overall and per load band, {int(plan['confidence'] * 100)}% bootstrap interval in brackets; each "
        "policy's k chosen by the rule above on its own gain. The deployed one is k_per_band_with_fallback.</p>"
        + table(["policy", "what", "overall gain"] + [f"band c{lv}" for lv in levels], policy_rows)
    )
    cells = table(
        [
            "category",
            "band",
            "decision k",
            "predicted speedup",
            "a replay's measurement: prediction interval",
            "why",
            "deployed k (predicted speedup)",
            "eligible k",
            "runner-up k",
            "runner-up speedup",
            "SLO excluded k > 0",
        ],
        [
            [
                c["category"],
                f"c{c['level']}",
                c["recommended_k"],
                _pm(c),
                "n/a (no noise estimate)"
                if c["prediction_low"] is None
                else f"[{c['prediction_low']:.3f}, {c['prediction_high']:.3f}]",
                c["decision"],
                f"{c['deployed_k']} ({c['deployed_speedup']:.3f} [{c['deployed_low']:.3f}, {c['deployed_high']:.3f}])"
                + (f": {c['deployed_note']}" if c["deployed_note"] else ""),
                ", ".join(map(str, c["eligible_ks"])) or "none",
                c["runner_up_k"],
                None
                if c["runner_up_k"] is None
                else f"{c['runner_up_speedup']:.3f} [{c['runner_up_low']:.3f}, {c['runner_up_high']:.3f}]",
                c["slo_excluded_speculation"],
            ]
            for c in plan["cells"]
        ],
    )
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
        deploy + "<h2>Per category and load band</h2><p>Each cell's decision by the rule above (why: the "
        "rule's reason), and the k the deployed policy gives it: the band's one k for the speculative pool, or off "
        "(the plain pool). The predicted speedup's interval is the bootstrap's, for the expected speedup; the "
        "prediction interval is where a replay's measured speedup (the planned run's repeats) should fall, with the "
        "run-to-run noise estimated from this run's repeats.</p>"
        + cells
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
