"""The report's section "What works with speculation on this stack", from the
``compatibility`` mart (one row per cell of a ``specdec compat`` run): the
counts per outcome first, then the matrix (one row per feature probe, one
column per engine and speculative method), the feature probes' paired
speedups (with the feature and on the plain twin, with intervals and labels),
the multi-turn session by turn with prefix caching on and off, the
quantization cells of llama.cpp as their own table (target x draft bit widths:
acceptance and paired speedup), then every cell's evidence."""

from __future__ import annotations

from typing import Any

from specdec.analytics.labels import DEFAULT_MARGIN, bound_text, label_of
from specdec.analytics.report.data import Table
from specdec.analytics.report.html import esc, table
from specdec.schemas.compat import DEGRADE_RATIO, DEGRADE_SPEED_MARGIN, OUTCOMES

TITLE = "What works with speculation on this stack"

#: The evidence columns shown per cell (the mart has them all).
EVIDENCE_COLUMNS = (
    "engine",
    "spec_method",
    "feature",
    "probe",
    "outcome",
    "baseline_accepted",
    "speculative_accepted",
    "baseline_valid",
    "speculative_valid",
    "identical",
    "acceptance_rate",
    "plain_acceptance_rate",
    "acceptance_ratio",
    "baseline_capture_reconciles",
    "speculative_capture_reconciles",
    "n",
    "detail",
)

DEFINITIONS = (
    "works: valid in both arms, identical greedy outputs, and the speculative arm drafted in the cell (its "
    "counters moved); "
    "degrades: valid and identical, but no draft token with the feature while the plain twin had some, "
    f"or acceptance per token below {DEGRADE_RATIO:.0%} of the plain twin's, or the speculative arm stalls near "
    "the end of a streamed JSON document or tool call (a tail gap at least 4x its median gap and 4x the baseline's "
    "largest), or its prefix cache hit rate falls over 2 points below the baseline's in every repeat; "
    "broken: an output violates the feature's constraint, or the greedy outputs differ; "
    "refused: the speculative server refused what the baseline accepted (its error in detail); "
    "not tested: valid and identical, but nothing shows that speculation ran: no draft token with the feature nor "
    "on the plain twin (the probe could not make the engine draft), or the speculation counters were not read; "
    "not offered: the baseline refused it too, or neither arm gave a valid output (the field ignored, or not "
    "met within the probe's max_tokens). "
    "Acceptance is from the engine's counters around each cell's own requests. Each feature probe's requests "
    "are sent --repeats times per arm, the arms alternated request by request: the speedup is the geometric mean "
    "of the paired e2e ratios; its label is decided by the verdict's rule (Holm over the pair's feature cells, "
    f"equivalence at margin {DEFAULT_MARGIN}) on the noise pooled over the pair's cells (the verdict's variance "
    "model), shown with its family-wise interval, or 'not measured' (no interval: a cell's own, on 1 df at 2 "
    "repeats, can span orders of magnitude); 'vs plain' is the speedup "
    "with the feature over the plain twin's, per repeat, and a valid, lossless cell whose 'vs plain' interval lies "
    f"wholly below 1 / {1 + DEGRADE_SPEED_MARGIN:.2f} (the twin's speedup at least {1 + DEGRADE_SPEED_MARGIN:.2f} "
    "times the feature's) is degrades. Capture: whether the capture's rows of the cell's requests reconcile with the "
    "counters around them, per arm (empty: not captured); a cell that reconciles in one arm only is broken."
)

SPEED_COLUMNS = (
    "engine",
    "probe",
    "outcome",
    "speedup",
    "interval",
    "label",
    "plain twin",
    "vs plain",
    "vs plain 95% interval",
    "pairs",
)


def _interval_text(lo: Any, hi: Any) -> str:
    return "" if lo is None or hi is None else f"{bound_text(lo)}-{bound_text(hi)}"


def _speed_interval(d: dict[str, Any]) -> str:
    """The family-wise interval of a decided speed; none for 'not measured' (a cell's own interval on
    1 df can span orders of magnitude); a run before speed_label: the cell's own 95% interval."""
    if d.get("speed_label"):
        return _interval_text(d.get("speed_ci_low"), d.get("speed_ci_high"))
    return _interval_text(d["speedup_ci_low"], d["speedup_ci_high"])


def speed_table(t: Table) -> Table:
    """The feature probes' paired speedups (not the quantization cells: their own table)."""
    rows = [d for d in t.dicts() if d["feature"] != QUANT_FEATURE and d.get("speedup") is not None]
    body = tuple(
        (
            d["engine"],
            d["probe"],
            d["outcome"],
            _num(d["speedup"]),
            _speed_interval(d),
            speedup_label(d),
            _num(d.get("plain_speedup")),
            _num(d.get("speedup_vs_plain")),
            _interval_text(d.get("speedup_vs_plain_ci_low"), d.get("speedup_vs_plain_ci_high")),
            d["speedup_pairs"] or "",
        )
        for d in rows
    )
    return Table(SPEED_COLUMNS, body)


TURN_COLUMNS = (
    "engine",
    "prefix caching",
    "turn",
    "outcome",
    "prefix cache hit rate, baseline",
    "prefix cache hit rate, speculative",
    "acceptance per token",
    "mean acceptance length",
    "speedup",
    "interval",
    "label",
)


def turn_table(t: Table) -> Table:
    """The multi-turn session by turn, prefix caching on then off."""
    rows = [d for d in t.dicts() if d.get("turn") is not None]
    rows.sort(key=lambda d: (d["engine"], d.get("prefix_caching") != "on", d["turn"]))
    body = tuple(
        (
            d["engine"],
            d.get("prefix_caching") or "",
            d["turn"],
            d["outcome"],
            _num(d.get("baseline_prefix_cache_hit_rate")),
            _num(d.get("speculative_prefix_cache_hit_rate", d.get("prefix_cache_hit_rate"))),
            _num(d["acceptance_rate"]),
            _num(d["mean_acceptance_length"]),
            _num(d["speedup"]),
            _speed_interval(d),
            speedup_label(d),
        )
        for d in rows
    )
    return Table(TURN_COLUMNS, body)


def counts(t: Table) -> dict[str, int]:
    """Cells per outcome, every outcome listed (0 when none)."""
    found = [d["outcome"] for d in t.dicts()]
    return {o: found.count(o) for o in OUTCOMES}


def counts_line(t: Table) -> str:
    return ", ".join(f"{o} {n}" for o, n in counts(t).items())


def matrix(t: Table) -> Table:
    """Probe (feature) x pair (engine / method): each cell's outcome."""
    rows = t.dicts()
    pairs = list(dict.fromkeys(f"{r['engine']} / {r['spec_method']}" for r in rows))
    probes = list(
        dict.fromkeys((r["feature"], r["probe"]) for r in sorted(rows, key=lambda r: (r["feature"], r["probe"])))
    )
    cell: dict[tuple[Any, ...], str] = {
        (r["feature"], r["probe"], f"{r['engine']} / {r['spec_method']}"): r["outcome"] for r in rows
    }
    body = tuple((f, p, *(cell.get((f, p, pair), "") for pair in pairs)) for f, p in probes)
    return Table(("feature", "probe", *pairs), body)


QUANT_FEATURE = "quantization"

SPEED_NOTE = (
    "Feature probes' paired speedups: baseline e2e / speculative e2e per request pair, geometric mean and its "
    "label (faster, slower, equivalent, with the family-wise interval on the pair's pooled noise; or not "
    "measured, with no interval); 'plain twin' is the same on the same messages without the feature; 'vs plain' "
    "is the ratio of the two, per repeat, with its 95% interval."
)
TURN_NOTE = (
    "The 3-turn session, one row per turn: prefix caching on (one cache_salt per session, so a turn may reuse "
    "the earlier turns' KV) and off (a fresh cache_salt per turn and cache_prompt false, on the same servers); "
    "hit rate = prefix cache hits / queries of each arm around the turn's requests, side by side (empty where "
    "the engine does not export them); acceptance from the counters; speedup paired over the repeats."
)

QUANT_NOTE = (
    "Quantization cells (llama.cpp): the target at 4 bits (Q4_1 as shipped), 8 (Q8_0) and 16 (F16), each "
    "against the same target without speculation, with the draft (the same model) at 4 and 8 bits or with "
    "ngram-mod. The 8- and 16-bit files are made from the shipped Q4_1 weights (no other weights exist "
    "offline): they change storage and compute, not the 4-bit rounding. Acceptance per token = accepted / "
    "drafted; per round = the mean acceptance length, 1 + accepted / verify rounds (the bonus token "
    "included); both from the engine's counters; speedup = geometric mean of "
    "paired e2e ratios with its 95% interval over the pairs (one pair of servers: request noise only; "
    f"pointwise, not adjusted across cells); label by the report's rule at margin {DEFAULT_MARGIN}. "
    "The reference of the degrades rule is the same method on the shipped target."
)

QUANT_COLUMNS = (
    "target",
    "speculation",
    "outcome",
    "acceptance per token",
    "mean acceptance length",
    "speedup",
    "95% interval",
    "label",
    "pairs",
)


def _num(v: Any, digits: int = 2) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def speedup_label(d: dict[str, Any]) -> str:
    """A feature cell's ``speed_label`` (decided on the pair's pooled noise, ``replay.compat.speed``);
    else (quantization cells, a run before it) the label of its own interval (``labels.label_of``);
    '' without one."""
    if d.get("speed_label"):
        return str(d["speed_label"])
    lo, hi = d.get("speedup_ci_low"), d.get("speedup_ci_high")
    if lo is None or hi is None:
        return ""
    return label_of(lo, hi, DEFAULT_MARGIN)[0]


def quant_table(t: Table) -> Table:
    """One row per quantization cell, by target bits then draft bits (ngram-mod last)."""
    rows = [d for d in t.dicts() if d["feature"] == QUANT_FEATURE]
    rows.sort(key=lambda d: (d["target_bits"] or 0, d["draft_bits"] or 99))
    body = tuple(
        (
            f"{d['target_quant']} ({d['target_bits']}-bit)",
            f"draft {d['draft_quant']} ({d['draft_bits']}-bit)" if d["draft_quant"] else str(d["spec_method"]),
            d["outcome"],
            _num(d["acceptance_rate"]),
            _num(d["mean_acceptance_length"]),
            _num(d["speedup"]),
            ""
            if d["speedup_ci_low"] is None
            else f"{bound_text(d['speedup_ci_low'])}-{bound_text(d['speedup_ci_high'])}",
            speedup_label(d),
            d["speedup_pairs"] or "",
        )
        for d in rows
    )
    return Table(QUANT_COLUMNS, body)


def section_html(t: Table) -> str:
    """The section's body: counts per outcome, the matrix, the definitions, the quantization
    cells (when the run has them), every cell's evidence."""
    quant, speed, turns = quant_table(t), speed_table(t), turn_table(t)
    return (
        f"<p><b>Cells per outcome:</b> {esc(counts_line(t))}.</p>"
        + table(*_cols(matrix(t)))
        + f"<p>{esc(DEFINITIONS)}</p>"
        + (f"<p>{esc(SPEED_NOTE)}</p>" + table(*_cols(speed)) if speed.rows else "")
        + (f"<p>{esc(TURN_NOTE)}</p>" + table(*_cols(turns)) if turns.rows else "")
        + (f"<p>{esc(QUANT_NOTE)}</p>" + table(*_cols(quant)) if quant.rows else "")
        + table(*_cols(t.pick(*EVIDENCE_COLUMNS)))
    )


def _cols(t: Table) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    return t.columns, t.rows


#: One colour per outcome, in ``OUTCOMES`` order (green to grey; ``not tested`` a blue grey).
OUTCOME_COLOURS = ("#2e7d32", "#f9a825", "#c62828", "#6a1b9a", "#78909c", "#9e9e9e")


def matrix_chart(t: Table) -> dict[str, Any]:
    """The matrix as a Vega-Lite chart: probe x (engine / method), coloured by outcome."""
    import altair as alt  # heavy: altair, imported only when used

    rows = [
        {
            "pair": f"{d['engine']} / {d['spec_method']}",
            "probe": f"{d['feature']}: {d['probe']}",
            "outcome": d["outcome"],
            "detail": str(d["detail"])[:200],
        }
        for d in t.dicts()
    ]
    spec: dict[str, Any] = (
        alt.Chart(alt.Data(values=rows))
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("pair:N", title=None),
            y=alt.Y("probe:N", title=None, sort=sorted({r["probe"] for r in rows})),
            color=alt.Color(
                "outcome:N", scale=alt.Scale(domain=list(OUTCOMES), range=list(OUTCOME_COLOURS)), title="outcome"
            ),
            tooltip=["pair:N", "probe:N", "outcome:N", "detail:N"],
        )
        .properties(width=160, title="What works with speculation: one cell per feature probe")
        .to_dict()
    )
    return spec


def summary_lines(t: Table) -> list[str]:
    """The terminal summary's lines for a compat run."""
    lines = [f"compatibility: {counts_line(t)}"]
    for d in t.dicts():
        if d["outcome"] != "works":
            lines.append(f"  {d['engine']} {d['probe']}: {d['outcome']} ({str(d['detail'])[:100]})")
    return lines
