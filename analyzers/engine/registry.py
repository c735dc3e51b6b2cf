"""Which analyzers exist: the built-ins, dotted paths from settings, and entry points.

Built-ins register through the same dotted-path mechanism as third-party analyzers.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points

from .base import Analyzer

ENTRY_POINT_GROUP = "response_auditor.analyzers"

BUILTIN_ANALYZERS: list[str] = [
    "analyzers.engine.builtin.redflag.RedflagAnalyzer",
    "analyzers.engine.builtin.bias.BiasAnalyzer",
    "analyzers.engine.builtin.tone.ToneAnalyzer",
    "analyzers.engine.guardrails.analyzers.LinksAnalyzer",
    "analyzers.engine.guardrails.analyzers.GroundingAnalyzer",
    "analyzers.engine.guardrails.analyzers.PromptLeakAnalyzer",
    "analyzers.engine.privacy.analyzer.PrivacyAnalyzer",
]


class RegistryError(Exception):
    pass


def import_dotted(path: str) -> object:
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise RegistryError(f"not a dotted path: {path!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"cannot import {path!r}: {exc}") from exc


def _instantiate(obj: object, origin: str) -> Analyzer:
    analyzer = obj() if isinstance(obj, type) else obj
    if not isinstance(analyzer, Analyzer):
        raise RegistryError(f"{origin} is not an Analyzer")
    return analyzer


class Registry:
    """An ordered set of analyzers by id."""

    def __init__(self, analyzers: Iterable[Analyzer] = ()) -> None:
        self._by_id: dict[str, Analyzer] = {}
        for analyzer in analyzers:
            self.add(analyzer)

    def add(self, analyzer: Analyzer) -> None:
        self._by_id[analyzer.id] = analyzer

    def get(self, analyzer_id: str) -> Analyzer | None:
        return self._by_id.get(analyzer_id)

    def ids(self) -> list[str]:
        return list(self._by_id)

    def annotation_types(self) -> list[str]:
        """The annotation types the analyzers declare, in registry order, each once."""
        return list(dict.fromkeys(t for a in self._by_id.values() for t in a.annotation_types))

    def __iter__(self) -> Iterator[Analyzer]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)


def builtin_ids() -> list[str]:
    """The ids of the built-in analyzers (a custom judge may take none of them)."""
    return [_instantiate(import_dotted(path), path).id for path in BUILTIN_ANALYZERS]


def build_registry(
    extra_paths: Iterable[str] = (), *, include_entry_points: bool = True
) -> Registry:
    """Built-ins, then analyzers named by dotted path, then installed entry points."""
    registry = Registry()
    for path in [*BUILTIN_ANALYZERS, *extra_paths]:
        registry.add(_instantiate(import_dotted(path), path))
    if include_entry_points:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            registry.add(_instantiate(ep.load(), f"entry point {ep.name!r}"))
    return registry


_default: Registry | None = None


def default_registry() -> Registry:
    """The built-ins and entry points, built once per process."""
    global _default
    if _default is None:
        _default = build_registry()
    return _default
