"""Shared test helpers live in tests/support/ (STYLE.md, tests): no test module imports another
test module or a conftest (issue 44, item 6)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imported_test_modules(path: Path) -> list[str]:
    """The modules under tests/ other than tests.support that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found += [n for n in names if n.startswith("tests.") and not n.startswith("tests.support")]
    return found


def test_no_test_module_imports_another(tmp_path):
    offenders = {str(p.relative_to(TESTS)): imported_test_modules(p) for p in TESTS.rglob("*.py")}
    assert {p: m for p, m in offenders.items() if m} == {}
    planted = tmp_path / "test_x.py"  # the check finds what it looks for
    planted.write_text(
        "import tests.support.duck\nfrom tests.plan.test_noise import x\nimport tests.importers.conftest\n"
    )
    assert imported_test_modules(planted) == ["tests.plan.test_noise", "tests.importers.conftest"]
