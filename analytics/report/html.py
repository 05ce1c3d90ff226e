"""Safe HTML rendering: every string that reaches the report goes through here.

Strings in a run (categories, prompt ids, outputs, error messages, server
arguments, manifest fields) come from users and servers and may be hostile.
Text and attribute values are HTML-escaped (``esc``); JSON placed inside a
``<script>`` block is made inert (``script_json``): ``<``, ``>`` and ``&`` are
written as ``\\u003c``, ``\\u003e``, ``\\u0026`` and U+2028/U+2029 as
``\\u2028``/``\\u2029``, so no ``</script>`` or ``<!--`` can appear in the
block and the text stays valid JSON (and valid JavaScript) with the same value.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from typing import Any

_SCRIPT_SAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def esc(value: object) -> str:
    """HTML-escape any value's text (quotes too, so it is safe in attributes)."""
    return html.escape(str(value), quote=True)


def script_json(obj: Any) -> str:
    """JSON text that is safe to place inside a ``<script>`` element.

    ``ensure_ascii`` keeps lone surrogates and other non-ASCII text as
    ``\\uXXXX`` escapes; the replacements make markup characters inert. The
    characters replaced can only occur inside JSON strings, where the escape
    means the same character, so ``json.loads`` gives back the same value."""
    text = json.dumps(_finite(obj), ensure_ascii=True, allow_nan=False, default=str)
    for raw, safe in _SCRIPT_SAFE.items():
        text = text.replace(raw, safe)
    return text


def _finite(obj: Any) -> Any:
    """NaN and infinities are not JSON: they become null (not applicable)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def fmt(value: object) -> str:
    """A cell's text: NULL is 'n/a' (not applicable), floats to 3 significant places."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _cell(v: object) -> str:
    """Numbers right-aligned (they compare down a column), text left."""
    num = isinstance(v, (int, float)) and not isinstance(v, bool)
    return f'<td class="num">{esc(fmt(v))}</td>' if num else f"<td>{esc(fmt(v))}</td>"


def table(
    columns: Iterable[str],
    rows: Iterable[Iterable[object]],
    *,
    css_class: str = "",
    table_id: str | None = None,
    row_ids: Iterable[str | None] | None = None,
) -> str:
    """An HTML table; every header and cell escaped. ``table_id`` and
    ``row_ids`` (one per row, None for none) are link targets (escaped too)."""
    rows = list(rows)
    ids = list(row_ids) if row_ids is not None else [None] * len(rows)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join(
        (f'<tr id="{esc(i)}">' if i else "<tr>") + "".join(_cell(v) for v in r) + "</tr>" for r, i in zip(rows, ids)
    )
    cls = f' class="{esc(css_class)}"' if css_class else ""
    tid = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{tid}{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def banner(kind: str, text: str) -> str:
    """A notice box: kind 'alarm' (a failed run) or 'warn' (read with care)."""
    return f'<div class="{esc(kind)}" role="alert">{esc(text)}</div>'
