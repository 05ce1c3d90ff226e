"""Shared test helpers live in tests/support/ (STYLE.md, tests): no test module imports another
test module or a conftest (issue 44, item 6)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imported_test_modules(path: Path, package: str | None = None) -> list[str]:
    """The modules under tests/ other than tests.support that ``path`` imports; a relative import
    (``from .conftest import x``) is read against ``package``, the module's own package (by
    default the one its place under tests/ gives)."""
    if package is None:
        package = ".".join(("tests", *path.parent.relative_to(TESTS).parts))
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [n for n in names if n.startswith("tests.") and not n.startswith("tests.support")]
    return found


def test_no_test_module_imports_another(tmp_path):
    offenders = {str(p.relative_to(TESTS)): imported_test_modules(p) for p in TESTS.rglob("*.py")}
    assert {p: m for p, m in offenders.items() if m} == {}
    planted = tmp_path / "test_x.py"  # the check finds what it looks for
    planted.write_text(
        "import tests.support.duck\nfrom tests.plan.test_noise import x\nimport tests.importers.conftest\n"
        "from .conftest import FakeCounter\nfrom . import test_cli\nfrom ..support import duck\n"
    )
    assert imported_test_modules(planted, "tests.importers") == [
        "tests.plan.test_noise",
        "tests.importers.conftest",
        "tests.importers.conftest",
        "tests.importers.test_cli",
    ]
