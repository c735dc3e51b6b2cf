"""The project's import graph stays acyclic and its packages small (docs "Layout").

grimp (import-linter's library) counts imports inside functions too, so a cycle hidden by
a function-level import fails here; the few function-level imports kept each say why
(`# deferred: <reason>`).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analyzers", "audits", "auditor_site")
MAX_MODULES = 12  # per package, beside its __init__.py
MAX_DEFERRED = 15  # project imports inside functions, each with its reason


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of modules larger than one (a cycle of imports)."""
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    importers: dict[str, set[str]] = {m: set() for m in imports}
    for module, imported in imports.items():
        for other in imported:
            importers.setdefault(other, set()).add(module)
    # Kosaraju: modules in order of finishing a depth-first walk, then walked backwards.
    order, seen = [], set()
    for start in imports:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(imports[start]))]
        while stack:
            module, rest = stack[-1]
            following = next((m for m in rest if m not in seen), None)
            if following is None:
                order.append(stack.pop()[0])
            else:
                seen.add(following)
                stack.append((following, iter(imports.get(following, ()))))
    found, placed = [], set()
    for start in reversed(order):
        if start in placed:
            continue
        component, stack = [], [start]
        placed.add(start)
        while stack:
            module = stack.pop()
            component.append(module)
            for other in importers.get(module, ()):
                if other not in placed:
                    placed.add(other)
                    stack.append(other)
        if len(component) > 1:
            found.append(sorted(component))
    return found


def function_level_imports() -> list[tuple[str, int, str]]:
    """(file, line, source line) of every project import inside a function."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            lines = text.splitlines()
            for function in ast.walk(ast.parse(text)):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(function):
                    if (
                        isinstance(node, ast.ImportFrom)
                        and (node.level or (node.module or "").split(".")[0] in PACKAGES)
                        or isinstance(node, ast.Import)
                        and any(a.name.split(".")[0] in PACKAGES for a in node.names)
                    ):
                        source = " ".join(lines[node.lineno - 1 : node.end_lineno])
                        found.append((str(path.relative_to(ROOT)), node.lineno, source))
    return sorted(set(found))


def test_the_import_graph_has_no_cycle_even_counting_imports_inside_functions(graph):
    assert cycles(graph) == []


def test_a_cycle_closed_by_an_import_inside_a_function_is_found():
    copy = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    copy.add_import(
        importer="audits.store.reports",
        imported="audits.intake.submit",
        line_number=1,
        line_contents="    from audits.intake import submit",
    )
    assert any("audits.store.reports" in cycle for cycle in cycles(copy))


def test_few_imports_inside_functions_remain_and_each_says_why():
    found = function_level_imports()
    assert len(found) <= MAX_DEFERRED, found
    assert [f for f in found if "# deferred:" not in f[2]] == []


def test_no_package_holds_more_than_twelve_modules():
    """Django's migrations aside."""
    crowded = {}
    for package in PACKAGES:
        for directory in [ROOT / package, *(ROOT / package).rglob("*")]:
            if not (directory / "__init__.py").is_file() or directory.name == "migrations":
                continue
            modules = [p for p in directory.glob("*.py") if p.name != "__init__.py"]
            name = str(directory.relative_to(ROOT))
            if len(modules) > MAX_MODULES:
                crowded[name] = len(modules)
    assert crowded == {}


def test_no_contract_waives_an_import():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    assert [c["id"] for c in contracts if c.get("ignore_imports")] == []
