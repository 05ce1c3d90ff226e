"""The report's section "What works with speculation on this stack", from the
``compatibility`` mart (one row per cell of a ``specdec compat`` run): the
counts per outcome first, then the matrix (one row per feature probe, one
column per engine and speculative method), then every cell's evidence."""

from __future__ import annotations

from typing import Any

from specdec.analytics.report.data import Table
from specdec.analytics.report.html import esc, table
from specdec.schemas.compat import OUTCOMES

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
    "n",
    "detail",
)

DEFINITIONS = (
    "works: valid in both arms, identical greedy outputs, speculation ran; "
    "degrades: valid and identical, but no draft token with the feature while the plain twin had some, "
    "or acceptance per token below half the plain twin's; "
    "broken: an output violates the feature's constraint, or the greedy outputs differ; "
    "refused: the speculative server refused what the baseline accepted (its error in detail); "
    "not offered: the baseline refused it too, or neither arm gave a valid output (the field ignored, or not "
    "met within the probe's max_tokens). "
    "Acceptance is from the engine's counters around each cell's own requests; one request per arm, "
    "so no speedup is claimed here."
)


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


def section_html(t: Table) -> str:
    """The section's body: counts per outcome, the matrix, the definitions, every cell's evidence."""
    return (
        f"<p><b>Cells per outcome:</b> {esc(counts_line(t))}.</p>"
        + table(*_cols(matrix(t)))
        + f"<p>{esc(DEFINITIONS)}</p>"
        + table(*_cols(t.pick(*EVIDENCE_COLUMNS)))
    )


def _cols(t: Table) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    return t.columns, t.rows


#: One colour per outcome, in ``OUTCOMES`` order (green to grey).
OUTCOME_COLOURS = ("#2e7d32", "#f9a825", "#c62828", "#6a1b9a", "#9e9e9e")


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
