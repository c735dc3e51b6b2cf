"""The small base class every analyzer derives from, built-in or third-party.

An analyzer is an object with an `id`, a `category`, a pydantic `Settings` model and an
async `analyze(audit, settings, context)` returning an `AnalyzerResult`. Write one like this::

    class ShoutingAnalyzer(Analyzer):
        id = "shouting"
        category = "communication"
        description = "Flags responses written in capitals."
        annotation_types = ("SHOUTING",)

        class Settings(AnalyzerSettings):
            max_ratio: float = 0.5

        async def analyze(self, audit, settings, context):
            ...
            return self.result(score=..., annotations=[...])

and name it in the `AUDITOR_EXTRA_ANALYZERS` setting (a dotted path) or in the
`response_auditor.analyzers` entry-point group of your package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .collisions import CollisionStore, InMemoryCollisionStore
from .config import AuditorConfig
from .contract import AnalyzerResult, Annotation, AuditInput, LinkRecord
from .limits import Omitted
from .trusted import analyzer_result

ProgressCallback = Callable[[dict[str, Any]], Awaitable[None] | None]


class AnalyzerSettings(BaseModel):
    """Base of every analyzer's settings: unknown keys are errors, so typos are caught."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class AuditContext:
    """What one audit shares between its analyzers and the auditor.

    `memo` lets analyzers that share one computation (the guardrail pipeline behind
    links, grounding and prompt_leak) run it once per audit. `cleaned_response`, `links`
    and `trace` are filled by the analyzers that clean the text.
    """

    config: AuditorConfig
    collision_key: str = ""
    # An audit and its re-runs share a family; None: every audit is its own.
    collision_family: str | None = None
    collision_store: CollisionStore = field(default_factory=InMemoryCollisionStore)
    services: dict[str, Any] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)
    cleaned_response: str | None = None
    links: list[LinkRecord] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    # What analyzers left out already, capping as they went (see limits.Omitted): per
    # analyzer id, and the trace lines and links past those in `trace` and `links`.
    omitted: dict[str, Omitted] = field(default_factory=dict)
    omitted_trace: int = 0
    omitted_links: int = 0
    progress: ProgressCallback | None = None
    # The loop time by which the whole audit must be done (limits.audit_timeout_s).
    deadline: float | None = None


class Analyzer:
    """Base class of analyzers. Subclasses set `id`, `category`, `Settings`, `analyze`."""

    id: ClassVar[str]
    category: ClassVar[str]
    description: ClassVar[str] = ""
    enabled_by_default: ClassVar[bool] = True
    Settings: ClassVar[type[AnalyzerSettings]] = AnalyzerSettings
    # Settings only the configuration may set, never per-audit `options` (e.g. code paths).
    config_only_settings: ClassVar[frozenset[str]] = frozenset()
    # The annotation type codes `analyze` may emit, declared once where they are defined:
    # the dashboard's filters offer them (`Registry.annotation_types`).
    annotation_types: ClassVar[tuple[str, ...]] = ()

    def parse_settings(self, raw: dict[str, Any]) -> AnalyzerSettings:
        return self.Settings.model_validate(raw)

    async def analyze(
        self, audit: AuditInput, settings: Any, context: AuditContext
    ) -> AnalyzerResult:
        raise NotImplementedError

    def never_waits(self, settings: Any, context: AuditContext) -> bool:
        """Whether `analyze` with these settings surely finishes without waiting on the
        event loop (no I/O: a heuristic without a model, no health checks). The auditor
        then runs it inline, without a task or a timer. Say True only when sure: one
        that waits anyway still completes, but any `asyncio.timeout` it entered before
        waiting is bound to the audit's task instead of its own."""
        return False

    def result(
        self,
        *,
        score: float,
        annotations: list[Annotation] | None = None,
        should_surface: bool = False,
        supplementary: dict[str, Any] | None = None,
    ) -> AnalyzerResult:
        return analyzer_result(
            self.id, self.category, score, should_surface, annotations, supplementary
        )
