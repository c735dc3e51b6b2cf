"""The registry: built-ins, dotted paths and entry points through one mechanism."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from analyzers.engine.base import Analyzer
from analyzers.engine.registry import BUILTIN_ANALYZERS, RegistryError, build_registry

ANALYZERS_DOC = Path(__file__).resolve().parents[3] / "docs" / "concepts" / "analyzers.md"


class ThirdParty(Analyzer):
    id = "third_party"
    category = "test"
    description = "An analyzer from outside the project."

    async def analyze(self, audit, settings, context):
        return self.result(score=0.0)


def test_builtins_are_registered_in_order():
    registry = build_registry(include_entry_points=False)
    assert registry.ids()[0] == "redflag"
    assert len(registry) == len(BUILTIN_ANALYZERS)


def test_it_loads_analyzers_from_dotted_paths():
    registry = build_registry([f"{__name__}.ThirdParty"], include_entry_points=False)
    assert isinstance(registry.get("third_party"), ThirdParty)


@pytest.mark.parametrize("path", ["nope", "no.such.module.Thing", f"{__name__}.Missing", "os.path"])
def test_it_refuses_bad_dotted_paths(path):
    with pytest.raises(RegistryError):
        build_registry([path], include_entry_points=False)


def test_it_loads_analyzers_from_the_entry_point_group(tmp_path, monkeypatch):
    dist = tmp_path / "thirdparty_auditor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty-auditor\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[response_auditor.analyzers]\nthird_party = {__name__}:ThirdParty\n"
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    registry = build_registry()
    assert isinstance(registry.get("third_party"), ThirdParty)


def test_every_builtin_analyzer_is_documented():
    """Like datasette's plug-in docs test: a registered analyzer must appear in the docs."""
    readme = ANALYZERS_DOC.read_text()
    for analyzer in build_registry(include_entry_points=False):
        assert f"| `{analyzer.id}` |" in readme, (
            f"{analyzer.id} is not documented in docs/concepts/analyzers.md"
        )
        assert analyzer.description, f"{analyzer.id} has no description"
