"""The shell of a self-contained report page: its style, the Vega-Lite bundle
inline, and a <div> per chart that ``vegaEmbed`` fills. Both the report of one
comparison (``report.py``) and the page of comparisons side by side
(``side_by_side.py``) are written with it.
"""

from __future__ import annotations

from specdec.analytics.report.html import esc, script_json

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}td.num{text-align:right}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:1em;font-size:12px;overflow:auto;white-space:pre-wrap}
.alarm{background:#fde2e1;border:2px solid #c0392b;color:#7b1d15;padding:.6em 1em;margin:.5em 0;font-weight:600}
.warn{background:#fff4d6;border:1px solid #d4a017;padding:.6em 1em;margin:.5em 0}
table.flagged{opacity:.6}"""


def page(title: str, charts: dict[str, dict], body: str) -> str:
    """A self-contained report page: the Vega-Lite bundle inline, ``body`` (HTML) after the
    title, each chart of ``charts`` embedded in the <div> of its name (``body`` places them)."""
    import vl_convert  # heavy (the Vega-Lite bundle): only when a page is written
    from altair.utils._importers import vl_version_for_vl_convert  # heavy: altair

    embeds = "\n".join(f"vegaEmbed('#{k}', {script_json(v)}, {{actions: false}});" for k, v in charts.items())
    # vl_convert's stub marks ``snippet`` required; the function's own docstring
    # (and its runtime) make it optional, with the default that defines vegaEmbed
    bundle = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())  # type: ignore[call-arg]
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{_CSS}</style>
<script>{bundle}</script></head><body>
<h1>{esc(title)}</h1>
{body}
<script>{embeds}</script>
</body></html>"""


def chart_divs(charts: dict[str, dict]) -> str:
    return "".join(f'<div id="{k}"></div>' for k in charts)
