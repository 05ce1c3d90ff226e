"""The import contract (tools/import_contract.py, pyproject.toml's [tool.importlinter]):
the tree keeps it, and an import planted against the layers, at the top of a module
or inside a function, breaks it with a message naming both modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "import_contract.py"


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--root", str(root)], capture_output=True, text=True, timeout=300)


@pytest.fixture()
def tree(tmp_path) -> Path:
    """A copy of the package folders (Python files only) and pyproject.toml."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    for folder in sorted(set(folders), key=len):
        if not (tmp_path / folder).exists():
            shutil.copytree(
                ROOT / folder,
                tmp_path / folder,
                symlinks=True,  # specdec/replay etc. are links to the top-level folders: copy the links
                ignore=lambda d, names: [
                    n for n in names if not (n.endswith(".py") or (Path(d) / n).is_dir()) or n == "__pycache__"
                ],
            )
    return tmp_path


def plant(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n" + text + "\n")


def test_the_tree_keeps_the_contract_and_has_no_cycle():
    out = check(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 2 kept, 0 broken." in out.stdout and "import cycles: 0" in out.stdout


def test_plain_lint_imports_from_the_repository_root_keeps_the_contract():
    """specdec/capture, specdec/replay, ... are committed links to the top-level folders, so
    import-linter run by hand (no wrapper, no mirror) sees the whole package."""
    exe = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 2 kept, 0 broken." in out.stdout


def test_the_copy_keeps_it_too(tree):
    assert check(tree).returncode == 0


def test_a_schemas_module_importing_the_replay_breaks_the_layers(tree):
    plant(tree / "schemas" / "strict.py", "from specdec.replay.config import ReplayConfig  # planted: backward")
    out = check(tree)
    assert out.returncode == 1
    assert "specdec.schemas is not allowed to import specdec.replay" in out.stdout
    assert "specdec.schemas.strict -> specdec.replay.config" in out.stdout


def test_an_import_inside_a_function_counts_as_well(tree):
    plant(
        tree / "replay" / "runner.py",
        "def _planted():\n    from specdec.cli.common import handle_errors\n    return handle_errors",
    )
    out = check(tree)
    assert out.returncode == 1
    assert "specdec.replay is not allowed to import specdec.cli" in out.stdout


def test_a_cycle_between_two_modules_of_one_room_is_found(tree):
    plant(
        tree / "analytics" / "report" / "html.py",
        "from specdec.analytics.report import page  # planted: page imports html",
    )
    out = check(tree)
    assert out.returncode == 1
    assert "import cycle (2 modules): specdec.analytics.report.html, specdec.analytics.report.page" in out.stdout
