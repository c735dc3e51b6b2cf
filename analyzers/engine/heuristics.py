"""Deterministic phrase rules, the judged analyzers' fallback when no model is configured.

A rule is a regular expression with a type, a weight (how strongly one match suggests the
problem) and a description. Matches become findings with exact offsets; the findings'
weights combine into a score as independent signals: 1 - prod(1 - w).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .contract import Annotation, Severity

FLAGS = re.IGNORECASE | re.MULTILINE


@dataclass(frozen=True)
class Rule:
    type: str
    pattern: re.Pattern[str]
    weight: float
    description: str
    severity: Severity = "warning"


def rule(
    type: str,
    pattern: str,
    weight: float,
    description: str,
    severity: Severity = "warning",
    *,
    flags: int = FLAGS,
) -> Rule:
    return Rule(type, re.compile(pattern, flags), weight, description, severity)


@dataclass(frozen=True)
class Finding:
    type: str
    start: int
    end: int
    weight: float
    description: str
    severity: Severity = "warning"


def find(text: str, rules: Iterable[Rule]) -> list[Finding]:
    """Every match of every rule, in text order, overlaps of one type merged (heaviest kept)."""
    found = [
        Finding(r.type, m.start(), m.end(), r.weight, r.description, r.severity)
        for r in rules
        for m in r.pattern.finditer(text)
        if m.end() > m.start()
    ]
    return dedupe(found)


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    kept: list[Finding] = []
    for f in sorted(findings, key=lambda f: (-f.weight, f.start)):
        if not any(k.type == f.type and k.start < f.end and f.start < k.end for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: (f.start, f.type))


def combine(weights: Iterable[float]) -> float:
    """Independent signals combined: 1 - prod(1 - w), in [0, 1]."""
    remaining = math.prod(1.0 - min(1.0, max(0.0, w)) for w in weights)
    return round(1.0 - remaining, 4)


def type_label(type_code: str) -> str:
    """`authority_deference` -> `Authority deference`."""
    return type_code.replace("_", " ").capitalize()


def score_label(score: float) -> str:
    """A word for a score: none, low, moderate, high."""
    if score <= 0.0:
        return "none"
    if score < 0.3:
        return "low"
    if score < 0.6:
        return "moderate"
    return "high"


def to_annotations(text: str, findings: Iterable[Finding]) -> list[Annotation]:
    return [
        Annotation(
            type=f.type,
            label=type_label(f.type),
            severity=f.severity,
            description=f.description,
            evidence=text[f.start : f.end],
            start=f.start,
            end=f.end,
        )
        for f in findings
    ]
