"""The report's first screen: a forest plot of the verdict.

One row per (category, level) of the ``speedup`` mart ('(system)' last), on a
log axis: the point is the speedup (the mart's
``speedup``), the thin bar the family-wise interval (``ci_low`` to
``ci_high``: what faster and slower read), the thick bar the 90% interval of the
two one-sided tests (``equivalence_low`` to ``equivalence_high``: what
equivalent reads, so an equivalent row's thick bar lies inside the band), the shaded band the run's margin ``[1 / (1 + margin), 1 + margin]``
(the mart's ``margin``, else the manifest's), the dashed rule 1x (no change);
point and bar coloured (and the point shaped) by ``label``. A column of text
beside the plot gives each row's figures and the repeats (and pairs) it used.

NULL is never drawn as a number: a row without an interval (one repeat) keeps
its point and reads "interval not measured"; a row without a speedup (a failed
level, no pairs) has neither point nor bar and reads "not measured" with the
mart's ``excluded_reason``. Both are labelled ``NOT_MEASURED``.

The colours are Okabe and Ito's colour-blind-safe set (bluish green, vermillion,
blue) with grey for "no call", and the shapes repeat the label (triangles point
the way of the effect), so the plot reads without colour too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from specdec.analytics.labels import bound_text
from specdec.analytics.report.html import esc
from specdec.analytics.report.verdict import row_anchor

__all__ = [
    "COLOURS",
    "NOT_MEASURED",
    "SHAPES",
    "axis_ticks",
    "forest_chart",
    "forest_html",
    "forest_rows",
    "forest_text",
    "run_margin",
]

NOT_MEASURED = "not measured"
#: label -> colour (Okabe-Ito; grey for inconclusive, light grey for not measured)
COLOURS = {
    "faster": "#009E73",
    "slower": "#D55E00",
    "equivalent": "#0072B2",
    "inconclusive": "#7F7F7F",
    NOT_MEASURED: "#BBBBBB",
}
SHAPES = {
    "faster": "triangle-right",
    "slower": "triangle-left",
    "equivalent": "diamond",
    "inconclusive": "circle",
    NOT_MEASURED: "cross",
}
#: the axis labels a reader expects on a ratio axis, coarse to fine; ``axis_ticks`` takes
#: whole tiers while they fit
_TIERS = (
    (1.0, 2.0, 4.0, 10.0, 100.0, 0.5, 0.25, 0.1),
    (1.5, 3.0, 5.0, 20.0, 50.0, 0.67, 0.33, 0.2),
    (1.25, 2.5, 6.0, 8.0, 15.0, 30.0, 0.8, 0.6, 0.4),
    (0.9, 1.1, 1.75),
    (0.95, 1.05),
    (0.98, 1.02),
)
_STEP = 22  # pixels per row
_REASON_CHARS = 48  # excluded_reason is cut to this in the text column (the speedup table has it whole)


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _count(n: object, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n if n is not None else 'no'} {word}s"


def _text(r: dict) -> str:
    """A row's figures in words: speedup (interval), repeats and pairs; NULL as 'not measured'."""
    used = f"{_count(r.get('repeats'), 'repeat')}, " + (
        "whole-level throughput" if r["category"] == "(system)" else _count(r.get("pairs"), "pair")
    )
    if r.get("speedup") is None:
        reason = r.get("excluded_reason") or ""
        if len(reason) > _REASON_CHARS:
            reason = reason[: _REASON_CHARS - 1] + "\u2026"
        return f"{NOT_MEASURED}: {reason}" if reason else NOT_MEASURED
    if r.get("ci_low") is None or r.get("ci_high") is None:
        return f"{_x(r['speedup'])}, interval {NOT_MEASURED} \u00b7 {used}"
    equivalence = (
        f"; TOST {bound_text(r['equivalence_low'])}\u2013{bound_text(r['equivalence_high'])}"
        if r.get("label") == "equivalent" and r.get("equivalence_low") is not None
        else ""
    )
    bounds = f"{bound_text(r['ci_low'])}\u2013{bound_text(r['ci_high'])}"  # on their side of 1, as the verdict's
    return f"{_x(r['speedup'])} ({bounds}{equivalence}) \u00b7 {used}"


def forest_rows(
    speedup: Iterable[dict], level: Callable[[int], str] = lambda k: f"c{k}", group: str | None = None
) -> list[dict]:
    """The plotted rows, one per mart row: categories in name order, '(system)' last,
    levels rising; ``level`` names a level key (``ReportData.level``). ``group``: a column
    whose value ends each row's name and orders rows within a level (the comparison of a
    run of named arms)."""

    def key(r: dict) -> tuple:
        return (r["category"] == "(system)", str(r["category"]), r["level"], str(r[group]) if group else "")

    out = []
    for r in sorted(speedup, key=key):
        interval = r.get("ci_low") is not None and r.get("ci_high") is not None
        measured = r.get("speedup") is not None and interval and r.get("label") is not None
        out.append(
            {
                "row": " \u00b7 ".join([str(r["category"]), level(r["level"])] + ([str(r[group])] if group else [])),
                "category": r["category"],
                "level": level(r["level"]),
                "speedup": r.get("speedup"),
                "ci_low": r.get("ci_low") if interval else None,
                "ci_high": r.get("ci_high") if interval else None,
                "ci_level": r.get("ci_level") if interval else None,
                "equivalence_low": r.get("equivalence_low") if interval else None,
                "equivalence_high": r.get("equivalence_high") if interval else None,
                "label": r["label"] if measured else NOT_MEASURED,
                "repeats": r.get("repeats"),
                "pairs": r.get("pairs"),
                "text": _text(r),
                "excluded_reason": r.get("excluded_reason"),  # whole, in the tooltip
                "href": "#" + row_anchor("speedup", r["category"], r["level"]),
            }
        )
    return out


def run_margin(speedup: Iterable[dict], default: float) -> float:
    """The run's margin: the mart's (one per run), else ``default`` (the manifest's)."""
    return next((r["margin"] for r in speedup if r.get("margin") is not None), default)


def axis_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """Ratio ticks inside [low, high] (1, 2, then 1.5, 3, then 1.25, 0.8 ...): whole tiers of
    ``_TIERS`` while there are at most ``most`` ticks, each at least a tenth of the axis's log
    width from the next, so the labels never crowd."""
    gap = math.log(high / low) / 10
    ticks: list[float] = []
    for tier in _TIERS:
        more = sorted(ticks + [t for t in tier if low <= t <= high])
        if len(more) > most or any(math.log(b / a) < gap for a, b in zip(more, more[1:])):
            break
        ticks = more
    return ticks


def _domain(rows: list[dict], margin: float) -> tuple[float, float]:
    values = [1.0 / (1.0 + margin), 1.0 + margin]
    values += [r[k] for r in rows for k in ("speedup", "ci_low", "ci_high") if r[k] is not None and r[k] > 0]
    return min(values) / 1.08, max(values) * 1.08


#: the forest's words for a sequential run (manifest ``design``): where each row's interval comes from
SEQUENTIAL_TEXT = (
    " This run was sequential (docs/manual/sequential.md): a look after each repeat from the first look "
    "on, each spending part of the 5% family-wise error. A decided row's bars are the intervals of the "
    "look that decided it, at that look's level, so a row decided early has a wider bar; a row left for "
    "futility (inconclusive) keeps the run's interval at its end. A row's point and the repeats beside it "
    "count every repeat its level ran, those after the decision included (a level runs on while any of "
    "its cells is open)."
)


def forest_text(margin: float, sequential: bool = False) -> str:
    """The rule in one short paragraph (plain text; the page escapes it); ``sequential``: the
    run's design was (``SEQUENTIAL_TEXT`` ends it)."""
    return (
        "Each row is one category at one level. Point: the speedup, the geometric mean over paired prompts "
        "of baseline / speculative end-to-end time; thin bar: the family-wise interval (5% over the run's "
        "labels together); thick bar: the 90% interval of two one-sided tests; shaded: "
        f"the run's margin of {margin:.0%}, {_x(1 / (1 + margin))} to {_x(1 + margin)}. Labels: faster = "
        "the thin bar lies wholly right of 1x, slower = wholly left of 1x, equivalent = neither, and the thick "
        "bar lies inside the band, inconclusive = anything else; "
        f"{NOT_MEASURED} = no interval (one repeat) or no speedup (a failed level). "
        "The text beside each row gives its figures and the repeats and prompt pairs it used."
    ) + (SEQUENTIAL_TEXT if sequential else "")


def forest_html(drawn: bool, margin: float, after: str, sequential: bool = False) -> str:
    """The page's first screen: the plot's ``<div id="forest">`` (``drawn``: its spec is embedded)
    and the rule in one paragraph, ``after`` (HTML) ending it; without a plot, a line saying why."""
    if not drawn:
        return '<p id="forest">No speedup was measured in this run, so there is no verdict to plot.</p>'
    return f'<div id="forest"></div><p>{esc(forest_text(margin, sequential))} {after}</p>'


def forest_chart(
    rows: list[dict], margin: float, title: str = "Verdict: speedup per category and level"
) -> dict | None:
    """The Vega-Lite spec of the forest plot of ``rows`` (``forest_rows``); None without rows."""
    if not rows:
        return None
    import altair as alt  # heavy: altair, imported only when used

    low, high = _domain(rows, margin)
    ticks = axis_ticks(low, high)
    order = [r["row"] for r in rows]
    labels = [k for k in COLOURS if k != NOT_MEASURED or any(r["label"] == NOT_MEASURED for r in rows)]
    x_scale = alt.Scale(type="log", domain=[low, high], nice=False)
    x_axis = alt.Axis(values=ticks, labelExpr="format(datum.value, '~g') + 'x'", grid=True, gridOpacity=0.4)

    def x(field: str) -> alt.X:  # every layer names the same scale, axis and title (merged, not listed)
        return alt.X(field, scale=x_scale, axis=x_axis, title="speedup, speculative over baseline (log scale)")

    # the domain, not only the order: a row with nothing to draw keeps its line, level with its text
    y = alt.Y(
        "row:N", sort=order, scale=alt.Scale(domain=order), title=None, axis=alt.Axis(labelLimit=300, labelFontSize=12)
    )
    colour = alt.Color(
        "label:N",
        title="label",
        scale=alt.Scale(domain=labels, range=[COLOURS[k] for k in labels]),
        legend=alt.Legend(orient="top", direction="horizontal", labelFontSize=12, titleFontSize=12, symbolOpacity=1),
    )
    shape = alt.Shape("label:N", title="label", scale=alt.Scale(domain=labels, range=[SHAPES[k] for k in labels]))
    tooltip = [
        alt.Tooltip("category:N"),
        alt.Tooltip("level:N"),
        alt.Tooltip("speedup:Q", format=".3f"),
        alt.Tooltip("ci_low:Q", format=".3f"),
        alt.Tooltip("ci_high:Q", format=".3f"),
        alt.Tooltip("ci_level:Q", format=".1%", title="interval level"),
        alt.Tooltip("equivalence_low:Q", format=".3f", title="90% low (equivalence)"),
        alt.Tooltip("equivalence_high:Q", format=".3f", title="90% high (equivalence)"),
        alt.Tooltip("label:N"),
        alt.Tooltip("repeats:Q"),
        alt.Tooltip("pairs:Q"),
        alt.Tooltip("excluded_reason:N"),
    ]
    shade = {c for i, c in enumerate(dict.fromkeys(r["category"] for r in rows)) if i % 2}
    stripes = [{"row": r["row"]} for r in rows if r["category"] in shade]
    layers = []
    if stripes:  # every other category on a pale stripe, so a category's levels read as a group
        layers.append(alt.Chart(alt.Data(values=stripes)).mark_rect(color="#f2f2f2").encode(y=y))
    band = [{"low": 1.0 / (1.0 + margin), "high": 1.0 + margin}]
    layers.append(
        alt.Chart(alt.Data(values=band)).mark_rect(color="#0072B2", opacity=0.15).encode(x=x("low:Q"), x2="high:Q")
    )
    layers.append(
        alt.Chart(alt.Data(values=[{"one": 1.0}])).mark_rule(color="#333333", strokeDash=[4, 3]).encode(x=x("one:Q"))
    )
    bars = [r for r in rows if r["ci_low"] is not None]
    if bars:
        layers.append(
            alt.Chart(alt.Data(values=bars))
            .mark_rule(strokeWidth=3)
            .encode(x=x("ci_low:Q"), x2="ci_high:Q", y=y, color=colour, tooltip=tooltip, href="href:N")
        )
    thick = [r for r in rows if r["equivalence_low"] is not None and r["equivalence_high"] is not None]
    if thick:  # the interval equivalent reads, inside the thin one
        layers.append(
            alt.Chart(alt.Data(values=thick))
            .mark_rule(strokeWidth=8, opacity=0.45)
            .encode(x=x("equivalence_low:Q"), x2="equivalence_high:Q", y=y, color=colour, tooltip=tooltip)
        )
    points = [r for r in rows if r["speedup"] is not None]
    if points:
        layers.append(
            alt.Chart(alt.Data(values=points))
            .mark_point(filled=True, size=90, opacity=1)
            .encode(x=x("speedup:Q"), y=y, color=colour, shape=shape, tooltip=tooltip, href="href:N")
        )
    plot = alt.layer(*layers).properties(width=520, height=alt.Step(_STEP))
    text = (
        alt.Chart(alt.Data(values=rows), title=alt.Title("speedup (interval) \u00b7 repeats, pairs", fontSize=12))
        .mark_text(align="left", baseline="middle", fontSize=12, x=0)
        .encode(y=alt.Y("row:N", sort=order, scale=alt.Scale(domain=order), axis=None), text="text:N", tooltip=tooltip)
        .properties(width=330, height=alt.Step(_STEP))
    )
    subtitle = (
        f"point: speedup; thin bar: family-wise interval (faster, slower); thick bar: 90% interval (equivalent); "
        f"shaded: the run's margin ({_x(1 / (1 + margin))} to {_x(1 + margin)}); dashed: 1x, no change"
    )
    return (
        alt.hconcat(plot, text, spacing=12)
        .properties(title=alt.Title(title, subtitle=subtitle, anchor="start", fontSize=15, subtitleFontSize=12))
        .configure_view(stroke=None)
        .to_dict()
    )
