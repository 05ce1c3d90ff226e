"""Host facts for the run manifest."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata


def host_facts() -> dict:
    facts: dict[str, object] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
    }
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        facts["memory_gib"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        facts["memory_gib"] = None
    return facts


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def package_version() -> str:
    try:
        return metadata.version("specdec")
    except metadata.PackageNotFoundError:
        return "0+unknown"
