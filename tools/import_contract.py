"""Check specdec's import contract: ``lint-imports`` (import-linter, the contracts in
pyproject.toml's ``[tool.importlinter]``) plus a list of every import cycle (grimp).

The repository keeps the design's top-level folders (``capture/``, ``replay/``, ...)
and installs them under one namespace through ``[tool.setuptools.package-dir]``
(``specdec.replay`` is ``replay/``). ``specdec/`` also holds committed symbolic links
to those folders (``specdec/replay -> ../replay``), so import-linter and grimp, which
find a package's modules by walking its folder, see the whole package: plain
``.venv/bin/lint-imports`` in the repository root checks the same contracts. This
script adds the list of cycles and works on any copy (``--root``, which the tests use
to plant a bad import): it builds, in a temporary folder, a ``specdec/`` of links to
``root/specdec/*`` and to each mapped package, and runs both tools there; nothing is
copied, the line numbers are the real files'.

    .venv/bin/python tools/import_contract.py            # this checkout
    .venv/bin/python tools/import_contract.py --root DIR # another copy (the tests plant a bad import)

Exit status 0 when every contract is kept and there is no cycle, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

PACKAGE = "specdec"


def build_mirror(root: Path, dest: Path) -> Path:
    """``dest/specdec``: links to ``root/specdec/*`` and to each folder that
    pyproject.toml maps to a direct subpackage of specdec. Returns ``dest``."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    pkg = dest / PACKAGE
    pkg.mkdir(parents=True)
    for entry in (root / package_dir.get(PACKAGE, PACKAGE)).iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry.resolve())
    for name, folder in package_dir.items():
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == PACKAGE:
            link = pkg / parts[1]
            if not link.exists():
                link.symlink_to((root / folder).resolve())
        elif len(parts) > 2:  # a nested package must sit inside its parent's folder
            parent = package_dir.get(".".join(parts[:-1]))
            if parent is not None and Path(folder) != Path(parent) / parts[-1]:
                raise SystemExit(f"{name} = {folder!r} is not inside {parent!r}: the mirror cannot place it")
    return dest


def lint_imports(root: Path, mirror: Path) -> int:
    """Run ``lint-imports`` on the mirror with root's pyproject.toml; its exit status."""
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(mirror)}
    return subprocess.call([str(exe), "--no-cache", "--no-logo", str(root / "pyproject.toml")], cwd=mirror, env=env)


def cycles(mirror: Path) -> list[list[str]]:
    """Every set of specdec modules that import each other (strongly connected
    components of more than one module, imports inside functions included)."""
    import grimp  # a dependency of import-linter, installed with the test extra

    sys.path.insert(0, str(mirror))
    try:
        graph = grimp.build_graph(PACKAGE, cache_dir=None)
    finally:
        sys.path.remove(str(mirror))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="Repository root to check (default: this checkout).",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="specdec-imports-") as tmp:
        mirror = build_mirror(root, Path(tmp))
        status = lint_imports(root, mirror)
        loops = cycles(mirror)
    for loop in loops:
        print(f"import cycle ({len(loop)} modules): {', '.join(loop)}")
    print(f"import cycles: {len(loops)}")
    return 1 if status or loops else 0


if __name__ == "__main__":
    sys.exit(main())
