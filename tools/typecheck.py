"""Run mypy on specdec with the settings of pyproject.toml's ``[tool.mypy]``.

mypy, like import-linter, finds a package's modules by its folder, and specdec's
subpackages live in top-level folders (``replay/`` is ``specdec.replay``). So
mypy runs on the linked ``specdec/`` that ``import_contract.build_mirror``
makes; the paths it prints are turned back into the repository's own.

    .venv/bin/python tools/typecheck.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from import_contract import PACKAGE, build_mirror

ROOT = Path(__file__).resolve().parent.parent


def real_path(line: str, prefixes: list[tuple[str, str]]) -> str:
    """``specdec/replay/x.py:3: error`` -> ``replay/x.py:3: error``."""
    for mirrored, real in prefixes:
        if line.startswith(mirrored):
            return real + line[len(mirrored) :]
    return line


def main() -> int:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    prefixes = sorted(
        ((name.replace(".", "/") + "/", folder.rstrip("/") + "/") for name, folder in package_dir.items()),
        key=lambda p: -len(p[0]),
    )
    exe = Path(sys.executable).with_name("mypy")
    with tempfile.TemporaryDirectory(prefix="specdec-mypy-") as tmp:
        mirror = build_mirror(ROOT, Path(tmp))
        proc = subprocess.run(
            [str(exe), "--config-file", str(ROOT / "pyproject.toml"), "-p", PACKAGE],
            cwd=mirror,
            env={**os.environ, "MYPY_CACHE_DIR": str(ROOT / ".mypy_cache")},
            capture_output=True,
            text=True,
        )
    for line in (proc.stdout + proc.stderr).splitlines():
        print(real_path(line, prefixes))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
