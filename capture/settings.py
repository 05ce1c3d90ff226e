"""Capture settings, read from the environment of the vLLM process and checked
once, before anything starts.

A bad value must never crash vLLM nor make the flush thread spin: every check
here raises ``SettingError`` with one line naming the variable (or path) and
the value, and the plugin logs that line once and leaves capture off. The CLI
uses the same checks for its options. Only the standard library is imported:
this runs inside every vLLM process.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specdec.runfolder import (
    ENV_CAPTURE_DIR,
    ENV_CAPTURE_FLUSH_S,
    ENV_CAPTURE_MAX_BYTES,
    ENV_CAPTURE_MAX_ROWS,
    ENV_CAPTURE_RUN_ID,
)

DEFAULT_RUN_ID = "adhoc"
DEFAULT_FLUSH_S = 1.0
#: Bounds of the flush interval: below 10 ms the flush thread would all but
#: spin; above an hour a killed engine loses too much (and threading's timeout
#: overflows near 9e9 s).
MIN_FLUSH_S = 0.01
MAX_FLUSH_S = 3600.0
#: Pending rows kept in memory while the disk cannot take them (see writer.py).
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_MAX_BYTES = 256 * 2**20


class SettingError(ValueError):
    """A capture setting that cannot be used; the message names it and its value."""


@dataclass(frozen=True)
class CaptureSettings:
    out_dir: Path
    run_id: str = DEFAULT_RUN_ID
    flush_s: float = DEFAULT_FLUSH_S
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES


def flush_seconds(value: object, name: str = ENV_CAPTURE_FLUSH_S) -> float:
    """A flush interval in seconds: a finite number in [MIN_FLUSH_S, MAX_FLUSH_S]."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and MIN_FLUSH_S <= seconds <= MAX_FLUSH_S):
        raise SettingError(
            f"{name}={value!r} is not a usable flush interval "
            f"(a number of seconds from {MIN_FLUSH_S} to {MAX_FLUSH_S:g})"
        )
    return seconds


def positive_int(value: object, name: str) -> int:
    """A whole number > 0 written in decimal digits (no '1e6', no '2.5')."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise SettingError(f"{name}={value!r} is not a whole number greater than 0")
    return int(text)


def usable_dir(path: Path, name: str = ENV_CAPTURE_DIR) -> Path:
    """Create ``path`` if needed and prove a file can be written in it (a probe
    file, removed at once: permission bits do not stop root, a read-only mount
    or a path below a regular file does)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".specdec-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise SettingError(f"{name}={str(path)!r} is not a writable directory ({reason})") from None
    return path


def from_env(environ: Mapping[str, str] | None = None) -> CaptureSettings | None:
    """The capture settings of this process; None when capture is not asked for
    (``SPECDEC_CAPTURE_DIR`` unset or empty). Raises SettingError."""
    env = os.environ if environ is None else environ
    out = env.get(ENV_CAPTURE_DIR)
    if not out:
        return None
    flush_s = flush_seconds(env.get(ENV_CAPTURE_FLUSH_S, DEFAULT_FLUSH_S))
    max_rows = positive_int(env.get(ENV_CAPTURE_MAX_ROWS, DEFAULT_MAX_ROWS), ENV_CAPTURE_MAX_ROWS)
    max_bytes = positive_int(env.get(ENV_CAPTURE_MAX_BYTES, DEFAULT_MAX_BYTES), ENV_CAPTURE_MAX_BYTES)
    return CaptureSettings(
        usable_dir(Path(out)), env.get(ENV_CAPTURE_RUN_ID) or DEFAULT_RUN_ID, flush_s, max_rows, max_bytes
    )
