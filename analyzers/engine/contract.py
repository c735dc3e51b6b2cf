"""The analyzer contract (docs/reference/contract.md section 1) as pydantic models.

Importable without Django: the engine, the CLI and the benchmarks use these alone.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Severity = Literal["info", "warning", "critical"]
RunStatus = Literal["ok", "failed", "timeout"]

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


class Source(BaseModel):
    """A retrieval source the response was written from."""

    model_config = ConfigDict(extra="ignore")

    title: str = ""
    url: str | None = None
    text: str = ""
    company: str | None = None


class AuditInput(BaseModel):
    """What every analyzer receives."""

    model_config = ConfigDict(extra="ignore")

    user_input: str = ""
    response: str = ""
    sources: list[Source] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Annotation(BaseModel):
    """One finding, with the exact evidence and its offsets in the original response."""

    type: str
    label: str
    severity: Severity = "warning"
    description: str = ""
    evidence: str | None = None
    start: int | None = None
    end: int | None = None


class AnalyzerResult(BaseModel):
    """What every analyzer returns; serialised with exactly these keys."""

    analyzer_id: str
    category: str
    score: float = Field(default=0.0, ge=0.0, le=1.0)
    should_surface: bool = False
    annotations: list[Annotation] = Field(default_factory=list)
    supplementary: dict[str, Any] = Field(default_factory=dict)

    @field_validator("score", mode="before")
    @classmethod
    def _clamp_score(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and value == value:  # not NaN
            return min(1.0, max(0.0, float(value)))
        return value


class AnalyzerRun(AnalyzerResult):
    """An AnalyzerResult as the auditor recorded it (docs/reference/contract.md section 2 `results`)."""

    status: RunStatus = "ok"
    error: str | None = None
    duration_ms: float = 0.0
    surfaced: bool = False


class LinkRecord(BaseModel):
    """One row of the audit's link table (docs/reference/contract.md section 2 `links`)."""

    url: str
    label: str = ""
    decision: Literal["keep", "replace", "strip"] = "keep"
    reason: str | None = None
    http_status: int | None = None
    healthy: bool | None = None


class AuditReport(BaseModel):
    """The outcome of one audit by the engine (no storage fields)."""

    threshold: float
    overall_score: float
    results: list[AnalyzerRun]
    cleaned_response: str
    links: list[LinkRecord] = Field(default_factory=list)
    trace: list[str] = Field(default_factory=list)

    @property
    def surfaced_results(self) -> list[AnalyzerRun]:
        return [r for r in self.results if r.surfaced]

    @property
    def has_card(self) -> bool:
        return any(r.surfaced for r in self.results)
