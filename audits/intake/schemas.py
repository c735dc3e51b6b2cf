"""Pydantic (ninja) schemas of the audits API: the request body and the Audit of docs/reference/contract.md."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field, model_validator


def _check_text(value: Any, path: str = "") -> None:
    """Reject NUL characters, lone surrogates and NaN/Infinity anywhere (not storable as
    JSON or text: the database refused them, which surfaced as a 409)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{path or 'body'}: NUL characters are not allowed")
        if not value.isascii():  # ASCII text (most) has no surrogates: no copy made
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{path or 'body'}: invalid unicode (lone surrogate)") from None
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path or 'body'}: NaN and Infinity are not valid JSON numbers")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, f"{path}.{k}" if path else str(k))
            _check_text(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_text(v, f"{path}.{i}" if path else str(i))


# Request bodies are plain pydantic models: ninja's `Schema` wraps every (nested) input in
# a `DjangoGetter` for ORM objects, which cost more than the rest of a batch's validation.
class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = ""
    url: str | None = None
    text: str = ""
    company: str | None = None


class AuditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_input: str
    response: str
    sources: list[SourceIn] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    collision_key: str | None = None
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _storable(self) -> AuditIn:
        # The fields one by one: the same checks as on `model_dump()`, without the copy.
        for name in ("user_input", "response", "external_id", "collision_key"):
            _check_text(getattr(self, name), name)
        for i, source in enumerate(self.sources):
            for name in ("title", "url", "text", "company"):
                _check_text(getattr(source, name), f"sources.{i}.{name}")
        _check_text(self.metadata, "metadata")
        _check_text(self.options, "options")
        return self


class AnnotationOut(Schema):
    id: int
    type: str
    label: str
    severity: Literal["info", "warning", "critical"]
    description: str
    evidence: str | None
    start: int | None
    end: int | None


class ResultOut(Schema):
    analyzer_id: str
    category: str
    score: float
    should_surface: bool
    annotations: list[AnnotationOut]
    supplementary: dict[str, Any]
    status: Literal["ok", "failed", "timeout"]
    error: str | None
    duration_ms: float
    surfaced: bool


class LinkOut(Schema):
    url: str
    label: str
    decision: Literal["keep", "replace", "strip"]
    reason: str | None
    http_status: int | None
    healthy: bool | None


Verdict = Literal["confirmed", "false_positive", "unsure"]


class ReviewIn(Schema):
    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    annotation_id: int | None = Field(
        default=None, description="an annotation of this audit; empty: the whole audit"
    )
    comment: str = Field(default="", max_length=5000)

    @model_validator(mode="after")
    def _storable(self) -> ReviewIn:
        _check_text(self.comment, "comment")
        return self


class ReviewOut(Schema):
    id: int
    annotation_id: int | None
    verdict: Verdict
    comment: str
    reviewer: str
    created_at: datetime
    current: bool = Field(description="false once a later verdict on the same target replaced it")


class AuditOut(Schema):
    id: str
    external_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    status: Literal["pending", "running", "complete", "failed"]
    incomplete: bool
    error: str | None
    attempts: int
    rerun_of: str | None
    user_input: str
    response: str
    cleaned_response: str
    sources: list[dict[str, Any]]
    metadata: dict[str, Any]
    collision_key: str | None
    options: dict[str, Any]
    threshold: float
    overall_score: float | None = Field(description="the mean of the successful results' scores")
    top_score: float | None = Field(
        description="the highest successful result score (the headline: what decides surfacing)"
    )
    top_analyzer: str | None = Field(description="the analyzer that gave `top_score`")
    has_card: bool
    results: list[ResultOut]
    surfaced_results: list[ResultOut]
    links: list[LinkOut]
    trace: list[str]
    reviewed_at: datetime | None
    reviews: list[ReviewOut]


class AuditAccepted(Schema):
    id: str
    status: Literal["pending", "running", "complete", "failed"]


class AuditPage(Schema):
    items: list[AuditOut]
    next: str | None


class AuditBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    audits: list[AuditIn] = Field(min_length=1, max_length=500)


class BatchItemOut(Schema):
    id: str | None
    status: Literal["pending", "running", "complete", "failed"] | None
    created: bool
    error: str | None


class AuditBatchOut(Schema):
    items: list[BatchItemOut]
