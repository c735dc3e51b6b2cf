"""The three guardrail analyzers: `links`, `grounding` and `prompt_leak`.

They share one run of the text pipeline per audit (through `context.memo`); whichever
runs first sets `context.cleaned_response`, `context.links` and `context.trace`. Link
health checks (when `links.check_health`) run once, after the text pipeline, and may
remove claims whose case-study link is unhealthy from the cleaned response.

Scores are severity-weighted: each annotation weighs info 0.05, warning 0.3, critical
1.0, and the score is 1 - prod(1 - weight), so one critical finding scores 1.0 and one
warning reaches the default threshold.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..base import Analyzer, AnalyzerSettings, AuditContext
from ..config import AuditorConfig
from ..contract import AnalyzerResult, Annotation, AuditInput, LinkRecord, Source
from ..limits import Limits, Omitted
from ..linkcheck import LinkChecker
from ..privacy.redaction import redact_text
from .caps import SEVERITY_WEIGHT
from .context import LABELS
from .grounding import CASE_STUDY_LINK_UNHEALTHY
from .settings import (
    DEFAULT_CASE_STUDY_URL,
    DEFAULT_PATTERNS,
    GuardrailSettings,
    settings_from_config,
)
from .stream import GuardrailResult, audit_text
from .syntax.text import one_line

MEMO_KEY = "guardrails"
SEED_KEY = "guardrails.seed"  # a pipeline result computed already (see Seed)
# Records past the audit's limits are counted, not built (caps.RecordCaps); the report is
# the same (tests compare with False).
EARLY_CAPS = True
SURFACE_CODES = frozenset(
    {
        "LINK_UNSAFE_SCHEME",
        "LINK_HOST_NOT_ALLOWED",
        "UNGROUNDED_CUSTOMER_CLAIM",
        "PROMPT_LEAK",
        "HTML_UNSAFE_MARKUP",
    }
)
# Which analyzer records each code of `LABELS`: grounding and prompt_leak one each, links
# every other (their `annotation_types`).
GROUNDING_TYPES = ("UNGROUNDED_CUSTOMER_CLAIM",)
PROMPT_LEAK_TYPES = ("PROMPT_LEAK",)
LINKS_TYPES = tuple(code for code in LABELS if code not in GROUNDING_TYPES + PROMPT_LEAK_TYPES)


# `LinkRecord.model_dump()` with its defaults, without the wrapper's keyword passing
_serialize_link = LinkRecord.__pydantic_serializer__.to_python


def _dump_link(record: LinkRecord) -> dict[str, Any]:
    """`record.model_dump()`: a copy of its fields when they are plain values of their
    declared types (what the serializer returns unchanged), else the serializer's."""
    values = record.__dict__
    if (
        type(record) is LinkRecord
        and len(values) == _LINK_FIELD_COUNT
        and type(values["url"]) is str
        and type(values["label"]) is str
        and type(values["decision"]) is str
        and (values["reason"] is None or type(values["reason"]) is str)
        and (values["http_status"] is None or type(values["http_status"]) is int)
        and (values["healthy"] is None or type(values["healthy"]) is bool)
    ):
        return dict(values)
    return _serialize_link(record)


_LINK_FIELD_COUNT = len(LinkRecord.model_fields)


def _dump_check() -> bool:
    samples = [
        LinkRecord(url="https://a.example/", label="x", decision="strip", reason="R"),
        LinkRecord(url="https://a.example/", http_status=404, healthy=False),
    ]
    return all(
        _dump_link(r) == _serialize_link(r) and list(_dump_link(r)) == list(_serialize_link(r))
        for r in samples
    )


if not _dump_check():  # pragma: no cover - only with another pydantic or contract
    _dump_link = _serialize_link  # type: ignore[assignment]  # noqa: F811


def weighted_score(annotations: list[Annotation], remaining: float = 1.0) -> float:
    """`remaining`: prod(1 - weight) of findings before these (counted, not built)."""
    for annotation in annotations:
        remaining *= 1.0 - SEVERITY_WEIGHT.get(annotation.severity, 0.3)
    return round(1.0 - remaining, 6)


def inert_text(text: str) -> str:
    """`text` with every bracket and angle bracket escaped: no link or tag can render."""
    return text.translate(_INERT)


_INERT = str.maketrans({"[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;"})


def health_checks_on(config: AuditorConfig) -> bool:
    """Whether the audit checks link health (the only waiting the guardrails do)."""
    return config.is_enabled("links") and bool(
        config.analyzers.get("links", {}).get("check_health", True)
    )


@dataclass(frozen=True)
class Seed:
    """The pipeline's result on a response, computed already (a stream's paragraphs, audited
    as they arrived): the audit uses it when its response, settings, sources and limits are
    the ones it was computed with, instead of running the pipeline again."""

    response: str
    settings: GuardrailSettings
    sources: tuple[Source, ...]
    limits: Limits
    result: GuardrailResult

    def memo(self) -> dict[str, Any]:
        """What `Auditor.audit(memo=...)` takes."""
        return {SEED_KEY: self}

    def fits(self, audit: AuditInput, settings: GuardrailSettings, limits: Limits) -> bool:
        return (
            audit.response == self.response
            and settings == self.settings
            and limits == self.limits
            and tuple(audit.sources) == self.sources
        )


class SharedRun:
    """One audit's pipeline result, health checks, and the context fields they set."""

    def __init__(self, audit: AuditInput, context: AuditContext) -> None:
        self.context = context
        config = context.config
        self.settings = settings_from_config(config)
        seed = context.memo.pop(SEED_KEY, None)
        try:
            if (
                isinstance(seed, Seed)
                and EARLY_CAPS
                and seed.fits(audit, self.settings, config.limits)
            ):
                self.result: GuardrailResult = seed.result
            else:
                self.result = audit_text(
                    audit.response,
                    self.settings,
                    audit.sources,
                    config.limits if EARLY_CAPS else None,
                )
        except Exception:
            # The analyzers report the failure; the text passed on must still be inert.
            text = audit.response
            if self.settings.redact:
                text = redact_text(text, self.settings.redact, self.settings.redact_region)
            context.cleaned_response = inert_text(text)
            raise
        self.check_health = health_checks_on(config)
        self.timeout_s = float(config.analyzers.get("links", {}).get("timeout_s", 4))
        self.health_annotations: list[tuple[str, Annotation]] = []
        self._health: asyncio.Future | None = None
        context.cleaned_response = self.result.cleaned_response
        context.links = self.result.links
        context.trace.extend(self.result.trace)
        caps = self.result.caps
        if caps is not None:
            context.omitted_trace += caps.trace_omitted
            context.omitted_links += caps.links_omitted
            context.omitted.update(caps.omitted)
            if caps.links_omitted:  # the links analyzer's list of links, too
                omitted = context.omitted.setdefault("links", Omitted())
                omitted.supplementary["links"] = len(self.result.links) + caps.links_omitted

    def score(self, analyzer_id: str, annotations: list[Annotation]) -> float:
        """The analyzer's score over its pipeline findings (all of them, built or only
        counted) followed by `annotations`, the ones after them."""
        caps = self.result.caps
        if caps is None:
            return weighted_score(self.result.for_analyzer(analyzer_id) + annotations)
        return weighted_score(annotations, caps.score_factor(analyzer_id))

    def left_out(self, analyzer_id: str) -> Omitted | None:
        """The analyzer's pipeline findings past the limits (counted, not built)."""
        caps = self.result.caps
        return None if caps is None else caps.omitted.get(analyzer_id)

    @classmethod
    def get(cls, audit: AuditInput, context: AuditContext) -> SharedRun:
        run = context.memo.get(MEMO_KEY)
        if run is None:
            run = context.memo[MEMO_KEY] = cls(audit, context)
        return run

    async def ensure_health(self, timeout_s: float | None = None) -> None:
        """Check the kept links once per audit. With none (every link stripped, or no
        link at all) the check could find nothing and remove nothing: then it is not
        started, and the analyzers go on without a trip through the event loop."""
        if self._health is None:
            if not self._urls_to_check():
                return
            self._health = asyncio.ensure_future(self._check(timeout_s or self.timeout_s))
        await asyncio.shield(self._health)

    def _urls_to_check(self) -> list[str]:
        """The links kept or replaced, built or only counted (past the limits)."""
        caps = self.result.caps
        unchecked = caps.unchecked if caps is not None else []  # links not built
        return [r.url for r in self.result.links if r.decision != "strip"] + unchecked

    async def _check(self, timeout_s: float) -> None:
        checker = self.context.services.get("link_checker")
        if checker is None:
            checker = LinkChecker(timeout_s=timeout_s)
        caps = self.result.caps
        unchecked = caps.unchecked if caps is not None else []  # links not built
        urls = self._urls_to_check()
        deadline = max(timeout_s, self.context.config.analyzer_timeout_s - 1.0)
        health = await checker.check_many(urls, timeout_s=timeout_s, deadline_s=deadline)
        for record in self.result.links:
            h = health.get(record.url)
            if h is not None and record.decision != "strip":
                record.http_status = h.http_status
                record.healthy = h.healthy
                if not h.healthy:
                    what = h.error or f"HTTP {h.http_status}"
                    self.health_annotations.append(
                        (
                            "links",
                            _annotation(
                                "LINK_UNHEALTHY", "warning", f"{record.url}: {what}", record.url
                            ),
                        )
                    )
                    self.context.trace.append(
                        f"[AUDIT] STRIP | LINK_UNHEALTHY | {one_line(record.url)}"
                    )
        for url in unchecked:  # after the built ones, as they came
            h = health.get(url)
            if h is not None and not h.healthy:
                what = h.error or f"HTTP {h.http_status}"
                self.health_annotations.append(
                    ("links", _annotation("LINK_UNHEALTHY", "warning", f"{url}: {what}", url))
                )
                self.context.trace.append(f"[AUDIT] STRIP | LINK_UNHEALTHY | {one_line(url)}")
        self._drop_unhealthy_claims(health)

    def _drop_unhealthy_claims(self, health: dict[str, Any]) -> None:
        cleaned = self.result.cleaned_response
        removals = []
        for pending in self.result.pending:
            h = health.get(pending.url)
            if h is None or h.healthy:
                continue
            claim = pending.claim
            claim["reasons"] = [CASE_STUDY_LINK_UNHEALTHY]
            annotation = _annotation(
                "UNGROUNDED_CUSTOMER_CLAIM",
                "critical",
                f"Customer claim removed: {CASE_STUDY_LINK_UNHEALTHY}.",
                claim["sentence"],
            )
            self.health_annotations.append(("grounding", annotation))
            self.context.trace.append(
                "[AUDIT] STRIP | UNGROUNDED_CUSTOMER_CLAIM | " + one_line(claim["sentence"])
            )
            end = pending.end
            while end < len(cleaned) and cleaned[end] in " \t":
                end += 1
            removals.append((pending.start, end))
        for start, end in sorted(removals, reverse=True):
            cleaned = cleaned[:start] + cleaned[end:]
        if removals:
            self.context.cleaned_response = cleaned


def _annotation(code: str, severity: Any, description: str, evidence: str) -> Annotation:
    return Annotation(
        type=code,
        label=LABELS.get(code, code),
        severity=severity,
        description=description,
        evidence=evidence,
    )


def _locate(annotation: Annotation, response: str) -> Annotation:
    if annotation.start is None and annotation.evidence:
        at = response.find(annotation.evidence)
        if at >= 0:
            annotation.start, annotation.end = at, at + len(annotation.evidence)
    return annotation


class LinksSettings(AnalyzerSettings):
    check_health: bool = Field(
        default=True, description="HEAD-check kept links (SSRF-guarded); LINK_UNHEALTHY"
    )
    timeout_s: float = Field(default=4.0, gt=0, le=60, description="Seconds per link health check")
    technical_doc_prefixes: list[str] = Field(
        default_factory=list,
        description="Host/path prefixes of technical docs (`docs.acme.example/api`)",
    )
    technical_doc_allowed_paths: list[str] = Field(
        default_factory=list, description="Technical-doc paths that may be linked"
    )
    # per-audit override of the configuration's `links.bare_urls`
    bare_urls: Literal["strip", "defang"] | None = Field(
        default=None, description="Bare URLs to hosts not allowed; none: the links section's"
    )


class LinksAnalyzer(Analyzer):
    id = "links"
    category = "links"
    description = (
        "Converts HTML anchors, strips unsafe, off-site and technical-doc links, upgrades "
        "generic labels from source titles, collapses repeated title suffixes, removes "
        "dangling attributions, and checks link health."
    )
    Settings = LinksSettings
    annotation_types = LINKS_TYPES

    def never_waits(self, settings: LinksSettings, context: AuditContext) -> bool:
        return not (settings.check_health and health_checks_on(context.config))

    async def analyze(
        self, audit: AuditInput, settings: LinksSettings, context: AuditContext
    ) -> AnalyzerResult:
        run = SharedRun.get(audit, context)
        if settings.check_health and run.check_health:
            await run.ensure_health(settings.timeout_s)
        health = [
            _locate(a, audit.response) for owner, a in run.health_annotations if owner == "links"
        ]
        annotations = run.result.for_analyzer("links") + health
        caps = run.result.caps
        if caps is not None:
            counts = dict(caps.decisions)
        else:
            counts = {}
            for r in run.result.links:
                counts[r.decision] = counts.get(r.decision, 0) + 1
        left_out = run.left_out("links")
        return self.result(
            score=run.score("links", health),
            annotations=annotations,
            should_surface=any(
                a.type in SURFACE_CODES and a.severity != "info" for a in annotations
            )
            or (
                left_out is not None
                and any(
                    code in SURFACE_CODES and worst != "info"
                    for code, (_, worst) in left_out.annotations.items()
                )
            ),
            supplementary={
                "links": [_dump_link(r) for r in run.result.links],
                "counts": counts,
            },
        )


class GroundingSettings(AnalyzerSettings):
    case_study_url: str = Field(
        default=DEFAULT_CASE_STUDY_URL,
        description="Where a customer's case study lives; {slug} is the customer's slug",
    )


class GroundingAnalyzer(Analyzer):
    id = "grounding"
    category = "grounding"
    description = (
        "Removes sentences that claim a customer result (a company and a number) unless the "
        "company is a known customer, the metric is in its facts or sources, and the "
        "sentence links to its (healthy) case study."
    )
    Settings = GroundingSettings
    annotation_types = GROUNDING_TYPES

    def never_waits(self, settings: GroundingSettings, context: AuditContext) -> bool:
        return not health_checks_on(context.config)

    async def analyze(
        self, audit: AuditInput, settings: GroundingSettings, context: AuditContext
    ) -> AnalyzerResult:
        run = SharedRun.get(audit, context)
        if run.check_health and run.result.pending:
            await run.ensure_health()
        health = [
            _locate(a, audit.response)
            for owner, a in run.health_annotations
            if owner == "grounding"
        ]
        annotations = run.result.for_analyzer("grounding") + health
        reasons = sorted({r for c in run.result.claims for r in c.get("reasons", [])})
        return self.result(
            score=run.score("grounding", health),
            annotations=annotations,
            should_surface=bool(annotations),
            supplementary={"reasons": reasons, "claims": run.result.claims},
        )


class PromptLeakSettings(AnalyzerSettings):
    patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_PATTERNS))


class PromptLeakAnalyzer(Analyzer):
    id = "prompt_leak"
    category = "compliance"
    description = "Removes lines that start with an echoed prompt-template heading."
    Settings = PromptLeakSettings
    annotation_types = PROMPT_LEAK_TYPES

    def never_waits(self, settings: PromptLeakSettings, context: AuditContext) -> bool:
        return True

    async def analyze(
        self, audit: AuditInput, settings: PromptLeakSettings, context: AuditContext
    ) -> AnalyzerResult:
        run = SharedRun.get(audit, context)
        annotations = run.result.for_analyzer("prompt_leak")
        left_out = run.left_out("prompt_leak")
        more = sum(count for count, _ in left_out.annotations.values()) if left_out else 0
        return self.result(
            score=run.score("prompt_leak", []),
            annotations=annotations,
            should_surface=bool(annotations),
            supplementary={"lines_removed": len(annotations) + more},
        )
