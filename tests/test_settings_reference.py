"""Every environment variable auditor_site/settings.py reads is documented in the settings reference."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "auditor_site" / "settings.py"
REFERENCE = ROOT / "docs" / "reference" / "settings.md"

# settings.py's own readers (envint/envbool/envlist) and the standard library's.
READERS = {"envint", "envbool", "envlist", "getenv"}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _name_read(node: ast.AST) -> str | None:
    """The variable name when `node` reads the environment with a literal name."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        is_environ_get = (
            isinstance(func, ast.Attribute)
            and func.attr in {"get", "setdefault"}
            and _is_environ(func.value)
        )
        if called in READERS or is_environ_get:
            return node.args[0].value
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        key = node.slice
        if isinstance(key, ast.Constant):
            return key.value
    return None


def env_names_read(source: str) -> set[str]:
    names = {_name_read(node) for node in ast.walk(ast.parse(source))}
    return {name for name in names if isinstance(name, str)}


def documented_names(markdown: str) -> set[str]:
    return set(re.findall(r"`([A-Z][A-Z0-9_]*)`", markdown))


def test_the_parser_finds_every_way_settings_read_the_environment():
    source = (
        "import os\n"
        "A = envint('A_INT', 1)\nB = envbool('B_BOOL', False)\nC = envlist('C_LIST', [])\n"
        "D = os.environ.get('D_GET', '')\nE = os.getenv('E_GETENV')\nF = os.environ['F_ITEM']\n"
        "os.environ.setdefault('G_DEFAULT', 'x')\nH = other('NOT_ENV')\n"
    )
    assert env_names_read(source) == {
        "A_INT",
        "B_BOOL",
        "C_LIST",
        "D_GET",
        "E_GETENV",
        "F_ITEM",
        "G_DEFAULT",
    }


def test_every_environment_variable_settings_read_is_in_the_settings_reference():
    read = env_names_read(SETTINGS.read_text(encoding="utf-8"))
    assert {"DEBUG", "AUDITOR_MAX_BODY_BYTES", "AUDITOR_PROXY_KEY_ENVS"} <= read
    missing = sorted(read - documented_names(REFERENCE.read_text(encoding="utf-8")))
    assert not missing, f"add these to docs/reference/settings.md: {missing}"
