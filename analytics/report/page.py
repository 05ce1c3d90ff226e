"""The shell of a self-contained report page: its style, the Vega-Lite bundle
inline, and a <div> per chart that ``vegaEmbed`` fills. Both the report of one
comparison (``report.py``) and the page of comparisons side by side
(``side_by_side.py``) are written with it.

The bundle (Vega, Vega-Lite and vega-embed, about 0.9 MB of JavaScript) is what
vl_convert ships for altair's Vega-Lite version; vl_convert assembles it in its
JavaScript engine on every call (0.96 s of one core on this project's host), so
it is kept in the specdec cache (``vega_bundle``) and assembled once per machine
and version.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import metadata

from specdec.analytics.report.html import esc, script_json
from specdec.atomic import atomic_write_text
from specdec.model import cache_root

log = logging.getLogger("specdec.analytics.report")

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}td.num{text-align:right}
th{background:#f3f3f3}pre{background:#f7f7f7;padding:1em;font-size:12px;overflow:auto;white-space:pre-wrap}
.alarm{background:#fde2e1;border:2px solid #c0392b;color:#7b1d15;padding:.6em 1em;margin:.5em 0;font-weight:600}
.warn{background:#fff4d6;border:1px solid #d4a017;padding:.6em 1em;margin:.5em 0}
table.flagged{opacity:.6}"""


def page(title: str, charts: dict[str, dict], body: str) -> str:
    """A self-contained report page: the Vega-Lite bundle inline, ``body`` (HTML) after the
    title, each chart of ``charts`` embedded in the <div> of its name (``body`` places them)."""
    embeds = "\n".join(f"vegaEmbed('#{k}', {script_json(v)}, {{actions: false}});" for k, v in charts.items())
    bundle = vega_bundle()
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{_CSS}</style>
<script>{bundle}</script></head><body>
<h1>{esc(title)}</h1>
{body}
<script>{embeds}</script>
</body></html>"""


def vega_bundle() -> str:
    """vl_convert's JavaScript bundle for altair's Vega-Lite version, from the cache
    (``cache_root()/vega-bundle/``, keyed by vl-convert's and Vega-Lite's versions) when a
    file there holds it whole (its SHA-256 beside it agrees), else assembled by vl_convert
    and written there atomically. A cache that cannot be read or written is logged and
    skipped: the bundle is then assembled, as without a cache."""
    from altair.utils._importers import vl_version_for_vl_convert  # heavy: altair

    vl_version = vl_version_for_vl_convert()
    path = cache_root() / "vega-bundle" / f"vl-convert-{metadata.version('vl-convert-python')}-{vl_version}.js"
    digest_path = path.with_suffix(".sha256")
    try:
        text = path.read_text(encoding="utf-8")
        if hashlib.sha256(text.encode("utf-8")).hexdigest() == digest_path.read_text(encoding="ascii").strip():
            return text
        log.warning("vega bundle cache %s does not match its SHA-256: assembled again", path)
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as e:
        log.warning("vega bundle cache %s not read: %s", path, e)
    import vl_convert  # heavy: assembles the bundle in its JavaScript engine

    # vl_convert's stub marks ``snippet`` required; the function's own docstring
    # (and its runtime) make it optional, with the default that defines vegaEmbed
    bundle = vl_convert.javascript_bundle(vl_version=vl_version)  # type: ignore[call-arg]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, bundle)
        atomic_write_text(digest_path, hashlib.sha256(bundle.encode("utf-8")).hexdigest() + "\n")
    except OSError as e:
        log.warning("vega bundle cache %s not written: %s", path, e)
    return bundle


def chart_divs(charts: dict[str, dict]) -> str:
    return "".join(f'<div id="{k}"></div>' for k in charts)
