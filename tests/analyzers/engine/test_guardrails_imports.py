"""The guardrail modules import each other without a cycle: the rules and the
pipeline share `guardrails/context.py`, which imports none of them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "analyzers" / "engine" / "guardrails"


def _local_imports(path: Path) -> set[str]:
    """The sibling modules a module imports (relative `from .x import ...`), at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_the_guardrail_modules_have_no_import_cycle():
    graph = {p.stem: _local_imports(p) for p in PACKAGE.glob("*.py")}
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*path, name]))
        if state.get(name) == 2 or name not in graph:
            return
        state[name] = 1
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        state[name] = 2

    for module in sorted(graph):
        visit(module, [])
    assert "context" in graph and "pipeline" not in graph["context"]


@pytest.mark.parametrize("module", ["links", "grounding", "prompt_leak", "context", "pipeline"])
def test_each_rule_module_imports_alone(module):
    done = subprocess.run(
        [sys.executable, "-c", f"import analyzers.engine.guardrails.{module}"],
        cwd=PACKAGE.parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
