"""Text that reaches a chart renderer, made safe to draw.

vl-convert (the renderer behind every chart PNG) aborts the whole process
("thread caused non-unwinding panic") on a label holding a C0 control
character such as ESC (``"\\x1b[2J"``), NUL or BEL: ``specdec report`` then
dies with exit 134 and no charts. ``specdec validate`` refuses such labels in
run files, as the traffic schema does (``schemas.strict.Label``), but a report
must still draw a run folder nobody validated. So every string of a chart spec
goes through ``strip_control`` on its way to the renderer: control characters
(Unicode category Cc: C0, DEL, C1) and the line and paragraph separators
(U+2028, U+2029) are removed, the same set ``Label`` refuses. A label that
held nothing else reads ``CONTROL_ONLY``.

Stripped, not replaced by a visible mark: the renderer's fonts may lack the
Control Pictures block, and a chart label is not where a user inspects bytes
(the report's tables escape them; ``validate`` names row and character).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CONTROL_ONLY", "chart_safe", "strip_control"]

#: Unicode category Cc (U+0000-U+001F, U+007F-U+009F) and U+2028, U+2029.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: What a label made only of control characters reads as.
CONTROL_ONLY = "(control characters)"


def strip_control(text: str) -> str:
    """``text`` without control characters; ``CONTROL_ONLY`` if nothing else was left
    of a non-empty text."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub("", text) or CONTROL_ONLY


def chart_safe(spec: Any) -> Any:
    """A copy of a Vega-Lite spec (dicts, lists, scalars) with every string
    value through ``strip_control``; keys (field names, ours) are kept.
    Walked without recursion, so a deep spec costs no stack."""
    root: list[Any] = [spec]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, spec)]  # (container, key, value to copy)
    while stack:
        parent, key, value = stack.pop()
        if isinstance(value, dict):
            copy: Any = dict(value)
            for k, v in value.items():
                stack.append((copy, k, v))
        elif isinstance(value, (list, tuple)):
            copy = list(value)
            for i, v in enumerate(value):
                stack.append((copy, i, v))
        elif isinstance(value, str):
            copy = strip_control(value)
        else:
            copy = value
        parent[key] = copy
    return root[0]
