"""The Audit as stored and exported (docs/reference/contract.md section 2), in one place.

Use `with_details(qs)` (or `AuditRun.objects` through `audit_queryset()`) before
serialising many runs so that every run costs no extra query.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet

from audits.models import AnalyzerRunRecord, Annotation, AuditRun, Review, TraceLine
from audits.store.link_rows import link_dicts, row_text, with_links
from audits.store.trace_rows import split_row
from audits.store.verdicts import review_to_dict


def with_details(qs: QuerySet[AuditRun]) -> QuerySet[AuditRun]:
    """Prefetch everything `audit_to_dict` reads (4 queries per batch, not per run; the
    link table comes with the runs, joined)."""
    return qs.select_related("link_table").prefetch_related(
        Prefetch(
            "results",
            queryset=AnalyzerRunRecord.objects.order_by("position", "id").prefetch_related(
                Prefetch("annotations", queryset=Annotation.objects.order_by("position", "id"))
            ),
        ),
        Prefetch("trace_lines", queryset=TraceLine.objects.order_by("position")),
        Prefetch("reviews", queryset=Review.objects.order_by("created_at", "id")),
    )


def audit_queryset() -> QuerySet[AuditRun]:
    return with_details(AuditRun.objects.all())


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def annotation_to_dict(a: Annotation) -> dict[str, Any]:
    return {
        "id": a.pk,
        "type": a.type,
        "label": a.label,
        "severity": a.severity,
        "description": a.description,
        "evidence": a.evidence,
        "start": a.start,
        "end": a.end,
    }


def result_to_dict(r: AnalyzerRunRecord, links: list[dict[str, Any]]) -> dict[str, Any]:
    """A result of the Audit JSON (`links`: its audit's link table, audits.store.link_rows)."""
    return {
        "analyzer_id": r.analyzer_id,
        "category": r.category,
        "score": r.score,
        "should_surface": r.should_surface,
        "annotations": [annotation_to_dict(a) for a in r.annotations.all()],
        "supplementary": with_links(r.supplementary or {}, links),
        "status": r.status,
        "error": r.error,
        "duration_ms": r.duration_ms,
        "surfaced": r.surfaced,
    }


def audit_to_dict(run: AuditRun) -> dict[str, Any]:
    """The Audit JSON of docs/reference/contract.md section 2 (plus a few documented extras)."""
    links = link_dicts(row_text(run))
    results = [result_to_dict(r, links) for r in run.results.all()]
    return {
        "id": str(run.id),
        "external_id": run.external_id,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "status": run.status,
        "incomplete": run.incomplete,
        "error": run.error or None,
        "attempts": run.attempts,
        "rerun_of": str(run.rerun_of_id) if run.rerun_of_id else None,
        "user_input": run.user_input,
        "response": run.response,
        "cleaned_response": run.cleaned_response,
        "sources": run.sources or [],
        "metadata": run.metadata or {},
        "collision_key": run.collision_key,
        "options": run.options or {},
        "threshold": run.threshold,
        "overall_score": run.overall_score,
        "top_score": run.top_score,
        "top_analyzer": run.top_analyzer or None,
        "has_card": run.has_card,
        "results": results,
        "surfaced_results": [r for r in results if r["surfaced"]],
        "links": links,
        "trace": [line for row in run.trace_lines.all() for line in split_row(row.text)],
        "reviewed_at": _iso(run.reviewed_at),
        "reviews": [review_to_dict(r) for r in run.reviews.all()],
    }
