"""Bounds on JSON read from a file before it is parsed: nesting depth and the
length of any one string, each violation named by its key path.

Python's ``json`` parser recurses once per nested array or object, so a file
of 200,000 ``[`` ends in a ``RecursionError`` (in the parser, or later in
whatever walks the result: pydantic, a renderer); and one 50 MB string is
carried whole into every message and page that shows the value. ``scan``
walks the text once, without recursion, and raises ``JsonLimitError`` at the
first array or object nested deeper than ``max_depth`` or the first string
longer than ``max_string`` characters of JSON text (escapes counted as
written), naming where it is (``traffic.categories.3.name``). It does not
check syntax: text that passes still goes to ``json.loads``, which names
syntax errors itself, and which can no longer recurse past ``max_depth``.

``scan`` also returns the size of each top-level value (``{key: characters}``)
so a caller refusing a file that is too large in all can name its largest field.

Used for ``manifest.json`` (``specdec.runfolder.read_manifest``).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["JsonLimitError", "scan"]

#: One JSON token: a string (escapes included), a bracket, a separator, or a run
#: of anything else (numbers, true, false, null, and garbage json.loads will name).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+', re.S)
#: Key path components shown before an ellipsis, and characters shown per key.
_SHOWN_PARTS, _SHOWN_KEY = 8, 40


class JsonLimitError(ValueError):
    """A bound broken: ``problem`` says which, ``field`` where (a dotted key path)."""

    def __init__(self, problem: str, field: str | None):
        super().__init__(f"{field}: {problem}" if field else problem)
        self.problem, self.field = problem, field


def _key(token: str) -> str:
    try:
        key = str(json.loads(token))  # a JSON string token: a str
    except ValueError:
        key = token[1:-1]
    return key if len(key) <= _SHOWN_KEY else key[:_SHOWN_KEY] + "…"


def _path(frames: list[list[Any]]) -> str | None:
    parts = [str(f[1]) for f in frames if f[1] is not None]
    if not parts:
        return None
    shown = ".".join(parts[:_SHOWN_PARTS])
    return shown + ".…" if len(parts) > _SHOWN_PARTS else shown


def scan(text: str, *, max_depth: int, max_string: int) -> dict[str, int]:
    """Raise JsonLimitError at the first value nested deeper than ``max_depth``
    or string longer than ``max_string``; else return the characters each
    top-level value of an object takes (empty for any other top level)."""
    # frames: [kind, key-or-index, expecting_key]; kind "{" or "["
    frames: list[list[Any]] = []
    top: dict[str, int] = {}
    top_key, top_start = None, 0
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == '"':
            is_key = bool(frames) and frames[-1][0] == "{" and frames[-1][2]
            if len(tok) - 2 > max_string:
                where = frames[:-1] + [["{", "(a key)", False]] if is_key else frames
                raise JsonLimitError(
                    f"a string of {len(tok) - 2:,} characters; at most {max_string:,} are read "
                    "(the value is not shown)",
                    _path(where),
                )
            if is_key:
                frames[-1][1], frames[-1][2] = _key(tok), False
                if len(frames) == 1:
                    if top_key is not None:
                        top[top_key] = m.start() - top_start
                    top_key, top_start = frames[0][1], m.start()
        elif c in "[{":
            if len(frames) >= max_depth:
                raise JsonLimitError(
                    f"arrays or objects nested more than {max_depth} deep (at most {max_depth} are read)", _path(frames)
                )
            frames.append([c, None if c == "{" else 0, c == "{"])
        elif c in "]}":
            if frames:
                frames.pop()
                if not frames and top_key is not None:
                    top[top_key] = m.start() - top_start
        elif c == "," and frames:
            if frames[-1][0] == "[":
                frames[-1][1] += 1
            else:
                frames[-1][2] = True
    return top
