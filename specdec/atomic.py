"""Atomic file writes: a reader, or a crash, never sees half a file.

Each write goes to a unique temporary name beside the target, is fsynced and
then renamed over it, so two writers never share a temporary file. Every
record file, manifest, report and database specdec writes goes through here;
the module imports nothing of specdec's, so every layer may use it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _tmp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a unique temporary name beside ``path``, fsync, rename. A reader
    or a crash never sees half a file; two writers never share a temp file."""
    path = Path(path)
    tmp = _tmp_beside(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: Path, write: Callable[[Path], object]) -> None:
    """Like atomic_write_bytes, for writers that take a path (Parquet, DuckDB)."""
    path = Path(path)
    tmp = _tmp_beside(path)
    try:
        tmp.unlink()  # some writers refuse an existing file
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
