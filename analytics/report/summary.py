"""The terminal summary of a report: the same ``ReportData`` as the HTML, as text.

Failures come first (the notices, then requests and failures per arm and
level), then the verdict in words (``verdict.py``). Columns are as wide as
their widest cell, so long category names never break the layout and nothing
is truncated. Strings from the run are printed
with control characters, line separators and bidirectional overrides shown as
``\\uXXXX`` escapes: hostile text cannot move the cursor, recolour the terminal
or fake a line.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from specdec.analytics.labels import RULE_SHORT, bounds_text
from specdec.analytics.report.compat import summary_lines as compat_lines
from specdec.analytics.report.data import ReportData
from specdec.analytics.report.html import fmt

_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}


def term(value: object) -> str:
    """Text safe to print: control, separator and bidi characters escaped."""
    out = []
    for ch in fmt(value):
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Zl", "Zp", "Cs") or ch in _BIDI:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two,
    combining marks none."""
    w = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        w += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return w


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> list[str]:
    """Left-aligned columns sized to the widest cell (header included)."""
    cells = [[term(h) for h in headers]] + [[term(v) for v in r] for r in rows]
    widths = [max(width(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        padded = [c + " " * (widths[i] - width(c)) for i, c in enumerate(r)]
        lines.append((indent + "  ".join(padded)).rstrip())
    return lines


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def summary_text(data: ReportData) -> str:
    m = data.manifest
    which = f" ({term(data.comparison[0])} against {term(data.comparison[1])})" if data.comparison else ""
    lines = [
        f"run {term(m.run_id)}{which}: {term(m.model)} ({term(m.dtype)}), levels {m.levels}, finished={m.finished}"
    ]
    for n in data.notices:
        lines.append(("!! " if n.kind == "alarm" else "note: ") + term(n.text))
    if data.levels.rows:
        lines.append(
            f"requests per arm and level (error_rate = failed / requests; a level fails above "
            f"max_error_rate {m.max_error_rate:g}):"
        )
        rows = [
            [
                r["arm"],
                data.level(r["level"]),
                r["requests"],
                r["requests_failed"],
                _pct(r["error_rate"]),
                r["error_types"] or "-",
                "FAILED" if r["level_failed"] else "ok",
            ]
            for r in data.levels.dicts()
        ]
        lines += text_table(["arm", "level", "requests", "failed", "error_rate", "errors", "status"], rows)
    if data.stability is not None:
        lines.append("stability: fault -> outcome:")
        st = data.stability
        cols: list[str] = [
            c
            for c in ("fault", "outcome", "requests_sent", "requests_failed", "server_healthy_after", "detail")
            if c in st.columns
        ] or list(st.columns)
        lines += text_table(cols, [[r[c] for c in cols] for r in st.dicts()])
    if data.compat is not None:
        lines += compat_lines(data.compat)
    if not data.has_replay:
        return "\n".join(lines)
    lines += _verdict_lines(data)
    lines += _speedup_lines(data)
    lines += _weighted_lines(data)
    lines.append("acceptance, speculative arm (length = 1 + accepted/rounds; rate = accepted/proposed; pooled):")
    acc = data.acceptance.dicts()
    if acc:
        lines += text_table(
            ["category", "length", "rate"],
            [[r["category"], r["mean_acceptance_length"], r["acceptance_rate"]] for r in acc],
        )
    else:
        lines.append("  none (no captured rounds of replayed requests: no per-round data for this run)")
        req = data.acceptance_requests
        if req is not None:
            lines.append(
                "acceptance from the engine's per-request stats, speculative arm (rate = accepted/proposed "
                "tokens; engine = its counters over the same blocks; mart acceptance_requests):"
            )
            lines += text_table(
                ["level", "category", "requests", "proposed", "accepted", "rate", "engine accepted", "diff"],
                [
                    [
                        data.level(r["level"]),
                        r["category"],
                        r["requests_with_stats"],
                        r["tokens_proposed"],
                        r["tokens_accepted"],
                        r["acceptance_rate"],
                        "-" if r["engine_accepted"] is None else r["engine_accepted"],
                        "-" if r["diff_accepted"] is None else r["diff_accepted"],
                    ]
                    for r in req.dicts()
                ],
            )
    lines += _capacity_lines(data)
    lines.append(_reconciliation_line(data))
    lines.append(_prefix_cache_line(data))
    lines.append(_text_identity_line(data))
    if data.sampling is not None:
        lines.append(_sampling_line(data))
    return "\n".join(lines)


def _verdict_lines(data: ReportData) -> list[str]:
    if not data.verdict:
        return []
    return ["verdict:"] + [f"  - {term(s.text)}" for s in data.verdict] + [f"  (labels: {RULE_SHORT}; see the report)"]


def _weighted_lines(data: ReportData) -> list[str]:
    """The overall speedup weighted by the traffic's category shares (mart
    speedup_weighted), one cell per level, beside the unweighted figure."""
    t = data.speedup_weighted
    rows = [r for r in t.dicts() if r["category"] == "(weighted)"] if t is not None else []
    if not rows:
        return []
    source = next((r["weights_source"] for r in rows if r["weights_source"]), None)
    cells = []
    for r in rows:
        if r["speedup"] is None:
            cells.append([data.level(r["level"]), "n/a", r["speedup_unweighted"], r["excluded_reason"] or "-"])
            continue
        cells.append(
            [
                data.level(r["level"]),
                f"{r['speedup']:.3f}{ci_text(r['ci_low'], r['ci_high'])}",
                r["speedup_unweighted"],
                "-",
            ]
        )
    return [
        f"speedup weighted by the traffic's category shares ({term(source or 'no weights')}; ratio of "
        "weighted mean e2e times; mart speedup_weighted):"
    ] + text_table(["level", "weighted [95% interval]", "unweighted", "excluded"], cells)


def _capacity_lines(data: ReportData) -> list[str]:
    """Highest concurrency each arm sustains under the SLO (mart capacity_under_slo)."""
    if data.capacity is None:
        return []
    rows = data.capacity.dicts()
    slo = rows[0]
    cells = []
    for r in rows:
        limit = (
            "none measured"
            if r["max_level"] is None
            else f"{data.level(r['max_level'])}{' or more' if r['sustains_all_measured'] else ''}"
        )
        fails = (
            "-"
            if r["first_failing_level"] is None
            else f"{data.level(r['first_failing_level'])} ({r['first_failing_reason']})"
        )
        ratio = "-" if r["capacity_ratio"] is None else f"{r['capacity_ratio']:.2f}x"
        cells.append([r["arm"], limit, fails, ratio])
    return [
        f"capacity under p95 TTFT <= {slo['slo_ttft_p95_ms']:g} ms and p95 TPOT <= {slo['slo_tpot_p95_ms']:g} ms "
        f"({slo['slo_source']} SLO; mart capacity_under_slo):"
    ] + text_table(["arm", "sustains", "first failing level", "vs baseline"], cells)


def _text_identity_line(data: ReportData) -> str:
    """The timed requests' text, compared without logprobs (not the lossless verdict)."""
    eq = [r for r in data.output_equality.dicts() if r["excluded_reason"] is None]
    pairs = sum(r["pairs"] for r in eq)
    excluded = len(data.output_equality.rows) - len(eq)
    note = f" ({excluded} group(s) excluded: level failed)" if excluded else ""
    head = "timed-pass text identity (no margins): "
    if pairs:
        return head + f"{sum(r['identical'] for r in eq)}/{pairs} greedy pairs identical" + note
    if data.output_equality.rows:
        return head + "n/a (no successful pair" + (f"; {note[2:-1]})" if excluded else ")")
    return head + "n/a (no greedy request)"


def _sampling_line(data: ReportData) -> str:
    """The sampling-mode check in one line: which groups differ, out of how many tested."""
    rows = data.sampling.dicts() if data.sampling is not None else []
    tested = [r for r in rows if r["verdict"] is not None]
    judged = [r for r in tested if r["verdict"] != "samples not distinct"]
    differ = [r for r in judged if r["verdict"] == "differs"]
    stuck = sorted({f"{term(r['category'])} c{r['level']}" for r in tested if r not in judged})
    head = "sampling (temperature > 0, permutation test stratified by prompt, per category, level and statistic, Bonferroni): "
    if not tested:
        return head + "no test could be made (see the report)"
    if differ:
        listed = ", ".join(
            f"{term(r['category'])} c{r['level']} {r['statistic']} (p={r['p_value']:.2g})" for r in differ
        )
        text = f"DIFFERS in {len(differ)} of {len(judged)} tests: {listed}"
    else:
        text = f"same distribution in all {len(judged)} tests" if judged else ""
    if stuck:
        text += ("; " if text else "") + (
            f"samples not distinct across seeds (an arm ignoring the seed?), not judged: {', '.join(stuck)}"
        )
    return head + text


def _prefix_cache_line(data: ReportData) -> str:
    blocks = data.blocks.dicts()
    if not blocks:
        return "prefix cache: n/a (no block)"
    reset = sum(1 for b in blocks if b["prefix_cache_reset"] is True)
    refused = sum(1 for b in blocks if b["prefix_cache_reset"] is False)
    rates = [b["prefix_cache_hit_rate"] for b in blocks if b["prefix_cache_hit_rate"] is not None]
    line = f"prefix cache: reset before {reset}/{len(blocks)} blocks (arm, level, repeat)"
    if refused:
        line += f", refused before {refused}"
    if reset + refused < len(blocks):
        line += f", not tried before {len(blocks) - reset - refused}"
    if rates:
        return line + f"; hit rate per block {_pct(min(rates))}-{_pct(max(rates))} (hits / queries)"
    return line + "; hit rate n/a (the servers do not export prefix-cache counters)"


def ci_text(low: float | None, high: float | None) -> str:
    """' [2.20-2.60]': an interval after its figure; '' without one."""
    return "" if low is None or high is None else f" [{bounds_text(low, high)}]"


def _cell(r: dict) -> str:
    """'2.400 [2.20-2.60] faster': speedup, the family-wise interval its label reads, label."""
    return fmt(r["speedup"]) + ci_text(r["ci_low"], r["ci_high"]) + (f" {r['label']}" if r["label"] else "")


def _speedup_lines(data: ReportData) -> list[str]:
    lines = [
        "speedup (speculative/baseline; per category = geometric mean of paired e2e ratios, (system) = "
        "per-repeat level throughput ratios; [family-wise interval] label):"
    ]
    rows = data.speedup.dicts()
    if not rows:
        return lines + ["  n/a (no level has requests in either arm)"]
    levels = sorted({r["level"] for r in rows})
    cells: dict[str, dict[int, str]] = {}
    reasons: dict[str, list[str]] = {}
    for r in rows:
        cat, key = r["category"], r["level"]
        if r["excluded_reason"] is not None:
            cells.setdefault(cat, {})[key] = "excluded"
            reasons.setdefault(r["excluded_reason"], []).append(f"{cat} {data.level(key)}")
        else:
            cells.setdefault(cat, {})[key] = _cell(r)
    lines += text_table(
        ["category"] + [data.level(c) for c in levels],
        [[cat] + [vals.get(c, "-") for c in levels] for cat, vals in cells.items()],
    )
    for reason, where in reasons.items():
        lines.append(f"  excluded: {term(reason)}: {term(', '.join(where))}")
    return lines


def _reconciliation_line(data: ReportData) -> str:
    if data.capture_note:
        return (
            "reconciliation of the rounds with the engine's counters: not applicable (no rounds were captured); "
            + _request_reconciliation(data)
        )
    recon = data.reconciliation.dicts()
    captured = [r for r in recon if r["capture_present"]]
    if not captured:
        return "reconciliation with vLLM counters: not applicable (no captured engine rows)"
    bad = sum(1 for r in captured if r["diff_rounds"] or r["diff_proposed"] or r["diff_accepted"])
    return "reconciliation with vLLM counters: " + ("exact" if bad == 0 else f"{bad} level(s) differ")


def _request_reconciliation(data: ReportData) -> str:
    """The per-request stats against the counters (acceptance_requests' (all) rows)."""
    req = data.acceptance_requests
    rows = [r for r in req.dicts() if r["category"] == "(all)" and r["engine_proposed"] is not None] if req else []
    if not rows:
        return "per-request stats against the counters: not applicable (no stats or no counters)"
    bad = sum(1 for r in rows if r["diff_proposed"] or r["diff_accepted"])
    return "per-request stats against the counters: " + (
        f"exact at {len(rows)} level(s)" if bad == 0 else f"{bad} of {len(rows)} level(s) differ"
    )
