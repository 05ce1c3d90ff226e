"""The wheel holds every package: each folder with an ``__init__.py`` under the package roots of
pyproject.toml is listed in its ``packages`` (a package left out is missing from an install that is
not editable, while the editable install the tests run on would still find it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {"specdec": "specdec", **config["package-dir"]}
    found = set()
    for package, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if init.is_relative_to(ROOT / folder) and "__pycache__" not in init.parts:
                parts = init.parent.relative_to(ROOT / folder).parts
                found.add(".".join((package, *parts)))
    missing = sorted(found - set(config["packages"]))
    assert missing == []
    assert {"specdec.engines.vllm", "specdec.traffic", "specdec.experiments.compat"} <= found  # the walk sees them
