"""Bounded work per audit: how much one audit may produce, and how long it may take.

The auditor applies these to every analyzer's result, built-in or third-party, after the
analyzer ran (`cap_run`) and to the audit's trace and link table (`cap_report_parts`), so
a huge response cannot turn into tens of thousands of stored rows or a 25 MB answer.
What is left out is counted, never silently dropped: one summary finding per capped type
says how many more there were, and a trace line says what was cut. An analyzer may cap
as it goes instead (the guardrail pipeline does): it hands over the first records and, in
`Omitted`, the counts of the rest, and the result is the same.

The defaults come from the environment (`AUDITOR_MAX_ANNOTATIONS_PER_TYPE`,
`AUDITOR_MAX_TRACE_LINES`, `AUDITOR_MAX_LINKS`, `AUDITOR_MAX_SUPPLEMENTARY_ITEMS`,
`AUDITOR_AUDIT_TIMEOUT_S`); the configuration's optional `limits` section overrides them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .contract import SEVERITY_RANK, AnalyzerRun, Annotation, LinkRecord


def _env_number(name: str, default: float, cast: type = int) -> Any:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = cast(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be positive")
    return number


class Limits(BaseModel):
    """The `limits` section of the configuration (optional; every key optional)."""

    model_config = ConfigDict(extra="forbid")

    max_annotations_per_type: int = Field(
        default_factory=lambda: _env_number("AUDITOR_MAX_ANNOTATIONS_PER_TYPE", 50), ge=1
    )
    max_trace_lines: int = Field(
        default_factory=lambda: _env_number("AUDITOR_MAX_TRACE_LINES", 500), ge=2
    )
    max_links: int = Field(default_factory=lambda: _env_number("AUDITOR_MAX_LINKS", 200), ge=1)
    max_supplementary_items: int = Field(
        default_factory=lambda: _env_number("AUDITOR_MAX_SUPPLEMENTARY_ITEMS", 100), ge=1
    )
    audit_timeout_s: float = Field(
        default_factory=lambda: _env_number("AUDITOR_AUDIT_TIMEOUT_S", 60.0, float), gt=0
    )


@dataclass
class Omitted:
    """What an analyzer already left out while it ran, capping as it went (the guardrail
    pipeline does, so that a huge response never builds its records): `cap_run` and
    `cap_report_parts` then count them as if they had been handed over.

    `annotations`: type -> [count, worst severity] of the findings left out past the
    first `max_annotations_per_type` of that type, in the order their first one came;
    `supplementary`: list key -> the list's full length (its first items are kept).
    """

    annotations: dict[str, list] = field(default_factory=dict)
    supplementary: dict[str, int] = field(default_factory=dict)


def cap_run(run: AnalyzerRun, limits: Limits, omitted: Omitted | None = None) -> AnalyzerRun:
    """At most `max_annotations_per_type` findings of each type (the first ones, in
    order), plus one summary finding per capped type with the count left out; the lists
    in `supplementary` cut to `max_supplementary_items` (counts in `supplementary.capped`).

    `omitted`: what the analyzer left out already (it kept the first findings of each
    type it capped): the result is the one the whole list would have given."""
    if omitted is None and len(run.annotations) <= limits.max_annotations_per_type:
        most = limits.max_supplementary_items
        for value in run.supplementary.values():
            if isinstance(value, list) and len(value) > most:
                break
        else:
            return run  # no type can be over its cap, no list too long: nothing to cut
    capped: dict[str, int] = {}
    per_type: dict[str, int] = {}
    kept: list[Annotation] = []
    worst: dict[str, str] = {}
    full_length: dict[str, int] = {}
    if omitted is not None:
        for kind, (count, severity) in omitted.annotations.items():
            capped[kind] = count
            worst[kind] = severity
        full_length = omitted.supplementary
    for annotation in run.annotations:
        seen = per_type.get(annotation.type, 0)
        per_type[annotation.type] = seen + 1
        if seen < limits.max_annotations_per_type:
            kept.append(annotation)
            continue
        capped[annotation.type] = capped.get(annotation.type, 0) + 1
        if SEVERITY_RANK[annotation.severity] > SEVERITY_RANK[worst.get(annotation.type, "info")]:
            worst[annotation.type] = annotation.severity
    cut_lists = {
        key: full_length.get(key, len(value))
        for key, value in run.supplementary.items()
        if isinstance(value, list)
        and full_length.get(key, len(value)) > limits.max_supplementary_items
    }
    if not capped and not cut_lists:
        return run
    for kind, count in capped.items():
        kept.append(
            Annotation(
                type=kind,
                label=f"{count} more {kind} findings not listed",
                severity=worst.get(kind, "info"),  # type: ignore[arg-type]
                description=(
                    f"This analyzer found {limits.max_annotations_per_type + count} findings of "
                    f"this type; the first {limits.max_annotations_per_type} are listed "
                    "(limits.max_annotations_per_type)."
                ),
            )
        )
    supplementary = dict(run.supplementary)
    for key in cut_lists:
        supplementary[key] = supplementary[key][: limits.max_supplementary_items]
    supplementary["capped"] = {"annotations": capped, "supplementary": cut_lists}
    run.annotations = kept
    run.supplementary = supplementary
    return run


def cap_report_parts(
    trace: list[str],
    links: list[LinkRecord],
    limits: Limits,
    omitted_trace: int = 0,
    omitted_links: int = 0,
) -> tuple[list[str], list[LinkRecord]]:
    """The first trace lines and links; a last trace line counts what was left out.

    `omitted_trace`, `omitted_links`: lines and links left out already, past at least
    the first `max_trace_lines` and `max_links` (see `Omitted`)."""
    notes = []
    total_links = len(links) + omitted_links
    if total_links > limits.max_links:
        notes.append(
            f"[AUDIT] limits: {total_links - limits.max_links} more links not listed "
            f"(limits.max_links = {limits.max_links})"
        )
        links = links[: limits.max_links]
    total_trace = len(trace) + omitted_trace
    if total_trace + len(notes) > limits.max_trace_lines:
        keep = limits.max_trace_lines - 1 - len(notes)
        notes.append(
            f"[AUDIT] limits: {total_trace - keep} more trace lines not kept "
            f"(limits.max_trace_lines = {limits.max_trace_lines})"
        )
        trace = trace[: max(0, keep)]
    return trace + notes, links
