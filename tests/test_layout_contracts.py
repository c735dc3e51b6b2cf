"""The layer rules of docs/contributing/architecture.md (pyproject `[tool.importlinter]`) hold, and break loudly.

`make test` runs `lint-imports` on the tree; these tests run it on a copy of the packages
with one deliberate violation each, so a contract that silently stopped checking fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("analyzers", "audits", "auditor_site")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the project's packages and its import-linter configuration."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(tree):
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "analyzers/engine/builtin/redflag.py",
            "import django.db  # noqa",
            "The engine imports no Django",
        ),
        (
            "analyzers/api/router.py",
            "from audits.intake import schemas  # noqa",
            "The configuration app imports nothing from audits",
        ),
        (
            "audits/live/fragments.py",
            "from audits.dashboard import queries  # noqa",
            "api, live, dashboard and review do not import each other",
        ),
        (
            "audits/store/reports.py",
            "from audits.intake import submit  # noqa",
            "audits is layered by pipeline stage",
        ),
        (
            "audits/cards/cards.py",
            "from audits.review import queue  # noqa",
            "audits is layered by pipeline stage",
        ),
        (
            "audits/events.py",
            "from audits.store import queries  # noqa",
            "The tables, events and signals of audits import none of its stages",
        ),
        (
            "analyzers/engine/contract.py",
            "from analyzers.engine import registry  # noqa",
            "No import circles between sibling modules",
        ),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(tree, module, line, contract):
    _append(tree / module, line)
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
