"""Shared pieces of the model-judged analyzers: the judged-item schema and quote checking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from analyzers.engine.builtin.heuristics import type_label
from analyzers.engine.contract import Annotation, Severity
from analyzers.engine.llm.evidence import locate_quote

SEVERITY_WEIGHT: dict[str, float] = {"info": 0.5, "warning": 0.8, "critical": 1.0}
_SEVERITY_ALIASES = {
    "low": "info", "minor": "info", "medium": "warning", "moderate": "warning",
    "high": "critical", "severe": "critical", "major": "critical",
}  # fmt: skip


def normalise_severity(value: Any) -> Any:
    if isinstance(value, str):
        value = value.strip().lower()
        return _SEVERITY_ALIASES.get(value, value)
    return value


def clamp_unit(value: Any) -> Any:
    """Numbers to [0, 1]; a 0-10 or 0-100 scale is tolerated."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        value = float(value)
        if 1.0 < value <= 10.0:
            value /= 10.0
        elif 10.0 < value <= 100.0:
            value /= 100.0
        return min(1.0, max(0.0, value))
    return value


class JudgedItem(BaseModel):
    """One problem a model reported. Subclasses narrow `type` to their codes."""

    type: str
    severity: Severity = "warning"
    confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    description: str = ""
    evidence: str = ""

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> Any:
        return normalise_severity(value)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        return clamp_unit(value)


def verify_items(
    response: str, items: Sequence[JudgedItem]
) -> tuple[list[Annotation], list[float], int]:
    """Annotations for the items whose quote is really in the response, their score weights,
    and how many items were dropped for an invented or missing quote."""
    annotations: list[Annotation] = []
    weights: list[float] = []
    found: list[tuple[str, int, int]] = []  # (type, start, end) of each annotation
    dropped = 0
    for item in items:
        span = locate_quote(response, item.evidence)
        if span is None:
            dropped += 1
            continue
        start, end = span
        if any(kind == item.type and s < end and start < e for kind, s, e in found):
            continue  # the same finding twice
        found.append((item.type, start, end))
        annotations.append(
            Annotation(
                type=item.type,
                label=type_label(item.type),
                severity=item.severity,
                description=item.description,
                evidence=response[start:end],
                start=start,
                end=end,
            )
        )
        weights.append(item.confidence * SEVERITY_WEIGHT[item.severity])
    return annotations, weights, dropped
