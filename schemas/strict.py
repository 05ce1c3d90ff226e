"""Strict field types for records read from a user (traffic rows, manifests).

Pydantic's default ("lax") mode turns ``"12"`` into 12, ``true`` into 1 and
``1.0`` into 1, and lets NaN and infinity through. A traffic file is input
from a person, so none of that is wanted: every type here is strict, and the
rules below are what the record models in ``records.py`` use.

Rules (and why):

* Integers are integers: no strings, booleans or floats (``1.0`` is refused:
  the writer meant an integer, or it meant something else).
* Floats are finite numbers: an integer is accepted (JSON ``0`` for a
  temperature, an Arrow int column); strings, booleans, NaN and infinity are not.
* Text is valid Unicode: a lone surrogate (``"\\ud800"`` in JSON) is refused,
  since it cannot be encoded as UTF-8 to be sent, written to Parquet or shown.
* ``Label`` (prompt_id, category): non-empty, no leading or trailing
  whitespace, no control characters (Unicode category Cc, which includes NUL,
  tab, newline, DEL and C1) and no line or paragraph separators (U+2028,
  U+2029): labels appear in logs, the terminal summary and the report, one per
  line. Other Unicode (accents, CJK, emoji, format characters) is allowed;
  the report escapes it.
* ``Prompt``: any Unicode text except NUL (U+0000), which no chat template or
  tokenizer treats as text, and not whitespace only (``str.isspace``; a
  whitespace prompt is almost always an empty field). Tabs, newlines and other
  control characters are allowed: prompts quote code and logs.
  Deliberately odd prompts (empty, whitespace, control characters) are the
  stability stage's job and never pass through ``TrafficRow``.
* ``RunName``: a plain folder name, see ``check_run_name``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, AllowInfNan, Strict
from pydantic_core import PydanticCustomError

#: Upper bound of any max_tokens (no served model generates more in one reply).
MAX_TOKENS_CEILING = 1_000_000
#: Upper bound of a traffic row's arrival_ms: 30 days (an imported trace's
#: span is refused beyond it, and so is a traffic file's row).
MAX_ARRIVAL_MS = 30 * 86_400_000.0
#: Upper bound of a temperature (OpenAI's documented maximum; vLLM accepts more,
#: but such a sample is noise, not a measurement).
MAX_TEMPERATURE = 2.0
#: Upper bound of a concurrency level (one client process opens that many streams).
MAX_LEVEL = 4096
#: Longest run name.
MAX_NAME_LEN = 100
#: Longest prompt_id or category.
MAX_LABEL_LEN = 200
#: The name of the link to the newest run (``runs/latest``, ``specdec.runfolder``): a run may not be called that.
LATEST = "latest"
_RESERVED_RUN_NAMES = {LATEST}

_RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def _valid_unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PydanticCustomError(
            "invalid_unicode",
            "contains a lone surrogate (U+{cp} at character {pos}), which is not valid Unicode text",
            {"cp": f"{ord(value[exc.start]):04X}", "pos": exc.start + 1},
        ) from None
    return value


def _label(value: str) -> str:
    _valid_unicode(value)
    if not value:
        raise PydanticCustomError("label_empty", "must not be empty")
    if value != value.strip():
        raise PydanticCustomError("label_whitespace", "must not start or end with whitespace")
    for pos, ch in enumerate(value, start=1):
        if unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029":
            raise PydanticCustomError(
                "label_control",
                "must not contain control characters (U+{cp} at character {pos})",
                {"cp": f"{ord(ch):04X}", "pos": pos},
            )
    return value


def _prompt(value: str) -> str:
    _valid_unicode(value)
    if not value or value.isspace():
        raise PydanticCustomError("prompt_blank", "must contain text, not only whitespace")
    if "\x00" in value:
        raise PydanticCustomError(
            "prompt_nul", "must not contain NUL (U+0000, at character {pos})", {"pos": value.index("\x00") + 1}
        )
    return value


def check_run_name(name: str) -> str:
    """A run name becomes a folder under ``--runs-dir`` and part of every
    request id: ASCII letters, digits, ``.``, ``_`` and ``-``; it starts with a
    letter, digit or ``_`` (so no hidden folder and no option look-alike); no
    ``..``; at most 100 characters; not ``latest`` (the link to the newest run).
    Returns the name, or raises ValueError saying which rule it breaks."""
    if not isinstance(name, str):
        raise ValueError(f"must be a string, got {type(name).__name__}")
    if not name:
        raise ValueError("must not be empty")
    if len(name) > MAX_NAME_LEN:
        raise ValueError(f"must be at most {MAX_NAME_LEN} characters (got {len(name)})")
    if "/" in name or "\\" in name:
        raise ValueError("must be a plain name, not a path (no '/' or '\\')")
    if name.startswith((".", "-")):
        raise ValueError("must not start with '.' or '-'")
    if ".." in name:
        raise ValueError("must not contain '..'")
    if not _RUN_NAME.fullmatch(name):
        bad = next(c for c in name if not re.fullmatch(r"[A-Za-z0-9._-]", c))
        raise ValueError(f"may hold only ASCII letters, digits, '.', '_' and '-' (found {bad!r})")
    if name.casefold() in _RESERVED_RUN_NAMES:
        raise ValueError(f"{name!r} is reserved (runs/latest points at the newest run)")
    return name


#: A plain arm name.
ARM_NAME = r"^[a-z0-9][a-z0-9_-]{0,39}$"
_ARM_NAME = re.compile(ARM_NAME)


def check_arm_name(name: Any) -> str:
    """``name`` if it is a plain arm name; a ValueError saying what one is, otherwise."""
    if not isinstance(name, str) or not _ARM_NAME.match(name):
        raise ValueError(
            f"arm name {name!r}: use 1-40 lower-case letters, digits, '-' or '_', starting with a "
            "letter or digit (it becomes part of request ids and file names)"
        )
    return name


def _as_field_error(check: Callable[[str], str], error_type: str, template: str) -> Callable[[str], str]:
    """A pydantic validator that runs ``check`` and reports its ValueError as a field error
    of ``error_type``, its message put into ``template`` as ``{why}``."""

    def validate(value: str) -> str:
        try:
            return check(value)
        except ValueError as exc:
            raise PydanticCustomError(error_type, template, {"why": str(exc)}) from None

    return validate


def check_finite_tree(value: Any, where: str = "") -> Any:
    """Walk free-form JSON-like data (dicts, lists, scalars): refuse NaN or
    infinite floats and strings that are not valid Unicode, naming the key path.
    Used on the manifest's free-form dicts (engine, host, traffic, ...)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError(
            "finite_number",
            "{where}must be a finite number, got {v}",
            {"where": f"{where}: " if where else "", "v": repr(value)},
        )
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise PydanticCustomError(
                "invalid_unicode", "{where}contains a lone surrogate", {"where": f"{where}: " if where else ""}
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_finite_tree(key, where)
            check_finite_tree(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_finite_tree(item, f"{where}[{i}]")
    return value


StrictInt = Annotated[int, Strict()]
FiniteFloat = Annotated[float, Strict(), AllowInfNan(False)]
StrictBool = Annotated[bool, Strict()]
Text = Annotated[str, Strict(), AfterValidator(_valid_unicode)]
Label = Annotated[str, Strict(), AfterValidator(_label)]
Prompt = Annotated[str, Strict(), AfterValidator(_prompt)]
RunName = Annotated[
    str, Strict(), AfterValidator(_as_field_error(check_run_name, "run_name", "not a plain run name: {why}"))
]
ArmName = Annotated[str, Strict(), AfterValidator(_as_field_error(check_arm_name, "arm_name", "{why}"))]
FreeForm = Annotated[dict[str, Any], Strict(), AfterValidator(check_finite_tree)]
